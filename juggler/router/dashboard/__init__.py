"""The dashboard face: `routes` serves the page and its files from `ui/` (plain HTML, CSS
and ES modules, no build step) at / and /ui; the page talks to the other faces' APIs."""

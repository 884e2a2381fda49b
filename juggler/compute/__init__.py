"""The compute plan: which CPU cores each busy backend may use (issue 21).

`plan` is the pure policy (busy backends, cores, settings -> shares); `board` is the
small shared-memory file per backend through which the router's manager publishes a
share and the backend's workers read it before every decode.
"""

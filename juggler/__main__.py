from juggler.cli.main import main

main()

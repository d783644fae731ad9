"""`python -m nbcli` runs the `nb` command line."""

from nbcli.cli import main

main()

from specrun.cli.app import entry

entry()

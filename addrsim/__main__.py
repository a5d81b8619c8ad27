from addrsim.commands.cli import entry

entry()

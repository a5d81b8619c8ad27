from addrsim.commands.start import entry

entry()

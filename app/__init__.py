"""The app: the command line (cli.py, its flags made from the settings in flags.py), the
composition root that builds a host from its settings (host.py, which also runs it headless),
and `infertui ask` (ask.py). The Textual apps it starts are in `infertui.tui`."""

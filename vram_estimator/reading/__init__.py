"""Reading the setup: scripts (signature defaults, argparse, dataclasses, globals, the calls
that build the model, optimizer and launcher), config files and launch scripts, ``# vram:``
comments and model names, each value with where it came from.  Nothing here knows what a
setting costs."""

"""The knowledge tables: model families and their exact parameter counts, GPUs and cloud
instances, and the registry the cost model asks instead of switching on names."""

"""The project model: import resolution (a local name to a qualified name, a module to a
file of the project), the index of a file's functions and classes, one analysis per module
shared by every importer (:mod:`.workspace`), and module summaries as plain data."""

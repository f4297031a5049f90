"""The interpreter core: the flow analysis of one function body (statements, environment,
loop fixpoint, joins), the values it computes, the events it records, the typed questions
rules ask, and the small helpers they share. It knows Python, not any library: what a call
of a library does is looked up in :mod:`..semantics`."""

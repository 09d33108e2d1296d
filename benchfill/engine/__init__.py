"""The run engine: one run end to end around the search (backend, simulated world start-up, endpoint
checks, the panel's benchmark rollouts and the fit, confirmation, the simulated truth, and what is
written to the store). ``benchfill.search`` is the algorithm alone and knows nothing of this."""

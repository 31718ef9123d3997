"""Cost models: how long an operator, an engine step, an encode or a transfer takes."""

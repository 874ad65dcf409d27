// Intentionally empty: the shims are inline functions in the header.

// JSONStore: placeholder until it lands.

// StoreConformance: placeholder until it lands.

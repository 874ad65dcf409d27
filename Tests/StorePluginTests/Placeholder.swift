// StorePluginTests: placeholder until it lands.

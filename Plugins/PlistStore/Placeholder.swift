// PlistStore: placeholder until it lands.

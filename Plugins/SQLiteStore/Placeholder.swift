// SQLiteStore: placeholder until it lands.

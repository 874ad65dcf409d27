func sqliteBenchmarks() {}

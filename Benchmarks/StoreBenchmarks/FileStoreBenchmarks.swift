func fileStoreBenchmarks() {}

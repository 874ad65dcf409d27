// Store benchmarks: each store operation next to the raw operation it wraps (the sqlite3 C API,
// bare JSONEncoder / PropertyListSerialization), measured in the same run, with "ratio" rows; and
// what one change costs in a large store against a small one (ChangeCostBenchmarks.swift).
import Benchmark

let benchmarks: @Sendable () -> Void = {
    sqliteBenchmarks()
    sqliteOpenBenchmarks()
    fileStoreBenchmarks()
    changeCostBenchmarks()
}

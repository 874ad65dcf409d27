// Store benchmarks: each store operation next to the raw operation it wraps (the sqlite3 C API,
// bare JSONEncoder / PropertyListSerialization), measured in the same run, with "ratio" rows.
import Benchmark

let benchmarks: @Sendable () -> Void = {
    sqliteBenchmarks()
    sqliteOpenBenchmarks()
    fileStoreBenchmarks()
}

// SQLite store benchmarks: 100,000 records inserted in one commit and fetched back, through
// SQLiteStore and through the raw sqlite3 C API with the same table layout (WITHOUT ROWID,
// 16-byte id primary key, WAL, synchronous=FULL, one transaction, one prepared statement), in
// the same run. The "ratio" rows time both back to back in each iteration and report
// store/raw time in percent (100 = no overhead; the goal is at most 250).
import Benchmark
import Foundation
import GRDBSQLite
import Persistence
import SQLiteStore

private let sqliteRowCount = 100_000

/// One row as the raw code holds it: the same values a record carries, in plain Swift fields.
private struct RawRow {
    var id: UUID
    var name: String
    var count: Int64
    var score: Double
    var created: Date
    var flag: Bool
}

private let sqliteSchema: Schema = try! Schema(
    version: 1,
    entities: [
        EntityDescription(
            "Row",
            attributes: [
                AttributeDescription("name", .string),
                AttributeDescription("count", .integer),
                AttributeDescription("score", .double),
                AttributeDescription("created", .date),
                AttributeDescription("flag", .boolean),
            ]
        )
    ]
)

/// The rows, as raw values and as records with the same contents.
private final class SQLiteFixture: @unchecked Sendable {
    let rows: [RawRow]
    let records: [Persistence.Record]
    let directory: URL

    init() {
        var generator = SystemRandomNumberGenerator()
        rows = (0..<sqliteRowCount).map { index in
            RawRow(
                id: UUID(),
                name: "row number \(index)",
                count: Int64.random(in: 0..<1_000_000, using: &generator),
                score: Double(index) * 0.37,
                created: Date(timeIntervalSinceReferenceDate: 700_000_000 + Double(index)),
                flag: index % 3 == 0
            )
        }
        records = rows.map { row in
            Persistence.Record(
                id: ObjectID(entity: "Row", uuid: row.id),
                values: [
                    "name": .string(row.name), "count": .integer(row.count), "score": .double(row.score),
                    "created": .date(row.created), "flag": .boolean(row.flag),
                ]
            )
        }
        directory = URL(fileURLWithPath: NSTemporaryDirectory()).resolvingSymlinksInPath()
            .appendingPathComponent("concord-sqlite-bench-\(getpid())")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func fresh(_ name: String) -> URL {
        let url = directory.appendingPathComponent(name)
        for file in SQLiteStore.files(at: url) { try? FileManager.default.removeItem(at: file) }
        return url
    }
}

// MARK: - Raw sqlite3

private let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

/// A raw connection with the store's table layout and pragmas.
private final class RawDatabase {
    var db: OpaquePointer?

    init(path: String, create: Bool) {
        precondition(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil) == SQLITE_OK)
        exec("PRAGMA journal_mode = WAL")
        exec("PRAGMA synchronous = FULL")
        if create {
            exec(
                "CREATE TABLE \"Row\" (id BLOB PRIMARY KEY NOT NULL, \"name\" TEXT, \"count\" INTEGER, \"score\" REAL, \"created\" REAL, \"flag\" INTEGER) WITHOUT ROWID"
            )
        }
    }

    deinit { sqlite3_close_v2(db) }

    func exec(_ sql: String) {
        let code = sqlite3_exec(db, sql, nil, nil, nil)
        precondition(code == SQLITE_OK, String(cString: sqlite3_errmsg(db)))
    }

    /// One transaction, one prepared statement: bind, step, reset per row.
    func insert(_ rows: [RawRow]) {
        exec("BEGIN IMMEDIATE")
        var statement: OpaquePointer?
        sqlite3_prepare_v2(
            db,
            "INSERT OR REPLACE INTO \"Row\" (id, \"name\", \"count\", \"score\", \"created\", \"flag\") VALUES (?, ?, ?, ?, ?, ?)",
            -1,
            &statement,
            nil
        )
        for row in rows {
            withUnsafeBytes(of: row.id.uuid) { _ = sqlite3_bind_blob(statement, 1, $0.baseAddress, 16, transient) }
            sqlite3_bind_text(statement, 2, row.name, -1, transient)
            sqlite3_bind_int64(statement, 3, row.count)
            sqlite3_bind_double(statement, 4, row.score)
            sqlite3_bind_double(statement, 5, row.created.timeIntervalSinceReferenceDate)
            sqlite3_bind_int64(statement, 6, row.flag ? 1 : 0)
            precondition(sqlite3_step(statement) == SQLITE_DONE)
            sqlite3_reset(statement)
        }
        sqlite3_finalize(statement)
        exec("COMMIT")
    }

    /// Every row in id order, read column by column into Swift values.
    func fetchAll() -> [RawRow] {
        var statement: OpaquePointer?
        sqlite3_prepare_v2(
            db,
            "SELECT id, \"name\", \"count\", \"score\", \"created\", \"flag\" FROM \"Row\" ORDER BY id",
            -1,
            &statement,
            nil
        )
        var rows: [RawRow] = []
        while sqlite3_step(statement) == SQLITE_ROW {
            let id = UUID(uuid: sqlite3_column_blob(statement, 0)!.loadUnaligned(as: uuid_t.self))
            let name = String(cString: sqlite3_column_text(statement, 1))
            rows.append(
                RawRow(
                    id: id,
                    name: name,
                    count: sqlite3_column_int64(statement, 2),
                    score: sqlite3_column_double(statement, 3),
                    created: Date(timeIntervalSinceReferenceDate: sqlite3_column_double(statement, 4)),
                    flag: sqlite3_column_int64(statement, 5) != 0
                )
            )
        }
        sqlite3_finalize(statement)
        return rows
    }
}

// MARK: - Benchmarks

private let sqliteRatio = BenchmarkMetric.custom("ratio to raw (%)", polarity: .prefersSmaller, useScalingFactor: false)

@inline(__always)
private func sqliteNanoseconds(_ body: () -> Void) -> UInt64 {
    let start = DispatchTime.now().uptimeNanoseconds
    body()
    return DispatchTime.now().uptimeNanoseconds - start
}

/// Counts ratio iterations, so raw and store alternate which runs first.
private final class SQLiteTurn: @unchecked Sendable {
    private var value = 0
    func next() -> Int {
        value += 1
        return value
    }
}

private func openStore(_ url: URL) -> SQLiteStore {
    try! SQLiteStore(url: url, schema: sqliteSchema, options: StoreOptions(presentsFiles: false))
}

func sqliteBenchmarks() {
    let fixture = SQLiteFixture()
    let timing = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        scalingFactor: .one,
        maxDuration: .seconds(10),
        maxIterations: 10
    )
    let ratio = Benchmark.Configuration(metrics: [sqliteRatio], maxDuration: .seconds(30), maxIterations: 10)

    // Insert 100,000 records in one commit.
    Benchmark("SQLite insert 100k raw sqlite3", configuration: timing) { benchmark in
        let raw = RawDatabase(path: fixture.fresh("raw-insert.sqlite").path, create: true)
        benchmark.startMeasurement()
        raw.insert(fixture.rows)
        benchmark.stopMeasurement()
    }
    Benchmark("SQLite insert 100k SQLiteStore", configuration: timing) { benchmark in
        let store = openStore(fixture.fresh("store-insert.sqlite"))
        defer { store.close() }
        benchmark.startMeasurement()
        try! store.commit(StoreChanges(inserts: fixture.records))
        benchmark.stopMeasurement()
    }
    let insertTurn = SQLiteTurn()
    Benchmark("SQLite insert 100k ratio", configuration: ratio) { benchmark in
        for _ in benchmark.scaledIterations {
            let iteration = insertTurn.next()
            let raw = RawDatabase(path: fixture.fresh("raw-insert.sqlite").path, create: true)
            let store = openStore(fixture.fresh("store-insert.sqlite"))
            var rawTime: UInt64 = 0
            var storeTime: UInt64 = 0
            if iteration % 2 == 0 {
                rawTime = sqliteNanoseconds { raw.insert(fixture.rows) }
                storeTime = sqliteNanoseconds { try! store.commit(StoreChanges(inserts: fixture.records)) }
            } else {
                storeTime = sqliteNanoseconds { try! store.commit(StoreChanges(inserts: fixture.records)) }
                rawTime = sqliteNanoseconds { raw.insert(fixture.rows) }
            }
            store.close()
            benchmark.measurement(sqliteRatio, Int(storeTime * 100 / max(rawTime, 1)))
        }
    }

    // Fetch the 100,000 back, in id order.
    let fetchURL = fixture.fresh("fetch.sqlite")
    do {
        let store = openStore(fetchURL)
        try! store.commit(StoreChanges(inserts: fixture.records))
        store.close()
    }
    Benchmark("SQLite fetch 100k raw sqlite3", configuration: timing) { benchmark in
        let raw = RawDatabase(path: fetchURL.path, create: false)
        benchmark.startMeasurement()
        let rows = raw.fetchAll()
        benchmark.stopMeasurement()
        precondition(rows.count == sqliteRowCount)
        blackHole(rows)
    }
    Benchmark("SQLite fetch 100k SQLiteStore", configuration: timing) { benchmark in
        let store = openStore(fetchURL)
        defer { store.close() }
        benchmark.startMeasurement()
        let records = try! store.fetch(FetchRequest(entity: "Row"))
        benchmark.stopMeasurement()
        precondition(records.count == sqliteRowCount)
        blackHole(records)
    }
    let fetchTurn = SQLiteTurn()
    Benchmark("SQLite fetch 100k ratio", configuration: ratio) { benchmark in
        let raw = RawDatabase(path: fetchURL.path, create: false)
        let store = openStore(fetchURL)
        defer { store.close() }
        for _ in benchmark.scaledIterations {
            let iteration = fetchTurn.next()
            var rawTime: UInt64 = 0
            var storeTime: UInt64 = 0
            if iteration % 2 == 0 {
                rawTime = sqliteNanoseconds { blackHole(raw.fetchAll()) }
                storeTime = sqliteNanoseconds { blackHole(try! store.fetch(FetchRequest(entity: "Row"))) }
            } else {
                storeTime = sqliteNanoseconds { blackHole(try! store.fetch(FetchRequest(entity: "Row"))) }
                rawTime = sqliteNanoseconds { blackHole(raw.fetchAll()) }
            }
            benchmark.measurement(sqliteRatio, Int(storeTime * 100 / max(rawTime, 1)))
        }
    }
}

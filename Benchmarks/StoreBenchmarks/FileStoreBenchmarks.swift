// JSON and plist store benchmarks: 100,000 records (an entity with a string, an integer, a
// double, a date and a boolean) saved in one commit and loaded by opening the store, next to the
// bare operation they wrap on the same data: `JSONEncoder`/`JSONDecoder` of an array of
// equivalent structs (JSON) and `PropertyListSerialization` of an array of equivalent
// dictionaries (plist), plus writing the bytes to a file or reading them back. The "ratio" rows
// time both back to back in each iteration and report store/raw time in percent (100 = no
// overhead). The store's save also pays for what the raw write does not do: coordination,
// `fsync` of the file and its directory, and sorting records for a deterministic file.
import Benchmark
import Foundation
import JSONStore
import Persistence
import PlistStore

private let fileRowCount = 100_000

/// One row as the raw code holds it.
private struct FileRow: Codable {
    var id: String
    var name: String
    var count: Int64
    var score: Double
    var created: Date
    var flag: Bool
}

private let fileSchema: Schema = try! Schema(
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

/// The rows as structs, as property-list dictionaries, and as records, and a directory.
private final class FileFixture: @unchecked Sendable {
    let rows: [FileRow]
    let records: [Persistence.Record]
    let directory: URL

    init() {
        rows = (0..<fileRowCount).map { (index: Int) -> FileRow in
            let seconds: Double = 700_000_000.25 + Double(index)
            return FileRow(
                id: UUID().uuidString.lowercased(),
                name: "row number \(index)",
                count: Int64(index) * 7_919,
                score: Double(index) * 0.37,
                created: Date(timeIntervalSinceReferenceDate: seconds),
                flag: index % 3 == 0
            )
        }
        records = rows.map { row in
            Persistence.Record(
                id: ObjectID(entity: "Row", uuid: UUID(uuidString: row.id)!),
                values: [
                    "name": .string(row.name), "count": .integer(row.count), "score": .double(row.score),
                    "created": .date(row.created), "flag": .boolean(row.flag),
                ]
            )
        }
        directory = URL(fileURLWithPath: NSTemporaryDirectory()).resolvingSymlinksInPath()
            .appendingPathComponent("concord-file-bench-\(getpid())")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    /// The rows as the property-list objects `PropertyListSerialization` takes.
    func propertyListObjects() -> [Any] {
        rows.map { row -> Any in
            var object: [String: Any] = [:]
            object["id"] = row.id
            object["name"] = row.name
            object["count"] = NSNumber(value: row.count)
            object["score"] = NSNumber(value: row.score)
            object["created"] = row.created
            object["flag"] = NSNumber(value: row.flag)
            return object
        }
    }
}

/// Nanoseconds `body` takes.
@inline(__always)
private func nanoseconds(_ body: () -> Void) -> UInt64 {
    let start = DispatchTime.now().uptimeNanoseconds
    body()
    return DispatchTime.now().uptimeNanoseconds - start
}

private let fileRatioMetric = BenchmarkMetric.custom(
    "ratio to raw (%)",
    polarity: .prefersSmaller,
    useScalingFactor: false
)

/// Registers raw, store and ratio benchmarks for one operation.
private func filePair(_ name: String, raw: @escaping @Sendable () -> Void, store: @escaping @Sendable () -> Void) {
    let timing = Benchmark.Configuration(
        metrics: [.wallClock, .peakMemoryResident],
        warmupIterations: 1,
        maxDuration: .seconds(20),
        maxIterations: 5
    )
    Benchmark("\(name) raw", configuration: timing) { benchmark in
        for _ in benchmark.scaledIterations { raw() }
    }
    Benchmark("\(name) store", configuration: timing) { benchmark in
        for _ in benchmark.scaledIterations { store() }
    }
    Benchmark(
        "\(name) ratio",
        configuration: .init(
            metrics: [fileRatioMetric],
            warmupIterations: 1,
            maxDuration: .seconds(40),
            maxIterations: 5
        )
    ) { benchmark in
        for iteration in benchmark.scaledIterations {
            // Alternate which goes first so neither always runs on a warmer cache.
            var rawTime: UInt64 = 0
            var storeTime: UInt64 = 0
            if iteration % 2 == 0 {
                rawTime = nanoseconds(raw)
                storeTime = nanoseconds(store)
            } else {
                storeTime = nanoseconds(store)
                rawTime = nanoseconds(raw)
            }
            benchmark.measurement(fileRatioMetric, Int(storeTime * 100 / max(rawTime, 1)))
        }
    }
}

/// A fresh store of `type` at `url` with every record of `fixture` committed in one commit.
private func saveStore(_ type: any PersistentStore.Type, _ fixture: FileFixture, at url: URL) {
    try? FileManager.default.removeItem(at: url)
    let store = try! type.init(url: url, schema: fileSchema, options: StoreOptions(presentsFiles: false))
    try! store.commit(StoreChanges(inserts: fixture.records))
    store.close()
}

/// Opens the store at `url` and checks it holds every record.
private func loadStore(_ type: any PersistentStore.Type, at url: URL) {
    let store = try! type.init(
        url: url,
        schema: fileSchema,
        options: StoreOptions(isReadOnly: true, presentsFiles: false)
    )
    precondition(try! store.count(for: FetchRequest(entity: "Row")) == fileRowCount)
    store.close()
}

func fileStoreBenchmarks() {
    let fixture = FileFixture()
    let directory = fixture.directory

    // JSON
    let jsonStore = directory.appendingPathComponent("store.json")
    let jsonRaw = directory.appendingPathComponent("raw.json")
    saveStore(JSONStore.self, fixture, at: jsonStore)
    let encoder = JSONEncoder()
    let rawJSON = try! encoder.encode(fixture.rows)
    try! rawJSON.write(to: jsonRaw)
    filePair(
        "JSON save 100k records",
        raw: { try! JSONEncoder().encode(fixture.rows).write(to: jsonRaw) },
        store: { saveStore(JSONStore.self, fixture, at: directory.appendingPathComponent("saved.json")) }
    )
    filePair(
        "JSON load 100k records",
        raw: {
            let rows = try! JSONDecoder().decode([FileRow].self, from: Data(contentsOf: jsonRaw))
            precondition(rows.count == fileRowCount)
        },
        store: { loadStore(JSONStore.self, at: jsonStore) }
    )

    // Property list (binary)
    let plistStore = directory.appendingPathComponent("store.plist")
    let plistRaw = directory.appendingPathComponent("raw.plist")
    saveStore(PlistStore.self, fixture, at: plistStore)
    let objects = fixture.propertyListObjects()
    try! PropertyListSerialization.data(fromPropertyList: objects, format: .binary, options: 0).write(to: plistRaw)
    filePair(
        "Plist save 100k records",
        raw: {
            let objects = fixture.propertyListObjects()
            try! PropertyListSerialization.data(fromPropertyList: objects, format: .binary, options: 0).write(
                to: plistRaw
            )
        },
        store: { saveStore(PlistStore.self, fixture, at: directory.appendingPathComponent("saved.plist")) }
    )
    filePair(
        "Plist load 100k records",
        raw: {
            let list = try! PropertyListSerialization.propertyList(from: Data(contentsOf: plistRaw), format: nil)
            precondition((list as! [Any]).count == fileRowCount)
        },
        store: { loadStore(PlistStore.self, at: plistStore) }
    )
}

// Per-change cost of sync against store size (issue "Cost follows what changed"): two devices
// share a container, a writer and a reader, each with an SQLite store whose one folder holds
// 1,000 notes, and another pair whose folder holds 100,000, in the same run. Rows are the 100k
// pair's median as a ratio to the 1k pair's (x100: 100 is flat, the goal is at most 150):
// - an arriving one-note log: the reader imports it and makes the local save that validates
//   what the import left (as an app does after each import),
// - a one-shot save: the writer saves a new note in the folder and exports it,
// - an idle pass: the reader looks for logs and finds none.
// Sync is driven by hand (`exportPending`, `importAvailable`), as a one-shot command does.
import Benchmark
import FolderSync
import Foundation
import Persistence
import SQLiteStore

private let notesSchema = try! Schema(
    version: 1,
    entities: [
        EntityDescription(
            "Folder",
            attributes: [AttributeDescription("name", .string)],
            relationships: [RelationshipDescription("notes", to: "Note", inverse: "folder", isToMany: true)]
        ),
        EntityDescription(
            "Note",
            attributes: [AttributeDescription("title", .string)],
            relationships: [RelationshipDescription("folder", to: "Folder", inverse: "notes")]
        ),
    ]
)

private let syncChangeCostRatio = BenchmarkMetric.custom(
    "100k notes / 1k notes (x100)",
    polarity: .prefersSmaller,
    useScalingFactor: false
)

/// One device of a pair: an SQLite store with the notes schema and its sync, driven by hand.
private struct NoteDevice {
    let coordinator: StoreCoordinator
    let store: any PersistentStore
    let sync: FolderSync

    init(at url: URL, container: URL, device: String) {
        let registry = StoreRegistry()
        registry.register(SQLiteStore.self)
        coordinator = StoreCoordinator(schema: notesSchema, registry: registry)
        store = try! coordinator.addStore(ofType: "sqlite", at: url, options: StoreOptions(presentsFiles: false))
        sync = try! FolderSync(
            coordinator: coordinator,
            store: store,
            container: container,
            storeName: "notes",
            deviceID: device
        )
        try! sync.enable(live: false)
    }

    /// `count` new notes in `folder`, saved one batch at a time.
    func addNotes(_ count: Int, to folder: ObjectID) {
        var added = 0
        while added < count {
            let context = ObjectContext(coordinator: coordinator, origin: .local)
            for _ in 0..<min(1_000, count - added) {
                added += 1
                var note = try! context.insert(entity: "Note", values: ["title": .string("note \(added)")])
                note.toOne["folder"] = folder
                try! context.update(note)
            }
            try! context.save()
        }
    }

    /// Imports what arrived, then saves locally (validating what the import left).
    func receive() {
        _ = try! sync.importAvailable()
        try! ObjectContext(coordinator: coordinator, origin: .local).save()
    }
}

/// A writer and a reader on one container, the folder holding `count` notes on both.
private final class NotePair: @unchecked Sendable {
    let writer: NoteDevice
    let reader: NoteDevice
    let folder: ObjectID

    init(in directory: URL, count: Int) {
        let container = directory.appendingPathComponent("container-\(count)", isDirectory: true)
        try! FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
        writer = NoteDevice(
            at: directory.appendingPathComponent("writer-\(count).sqlite"),
            container: container,
            device: "writer"
        )
        let context = ObjectContext(coordinator: writer.coordinator, origin: .local)
        folder = try! context.insert(entity: "Folder", values: ["name": "Inbox"]).id
        try! context.save()
        writer.addNotes(count, to: folder)
        _ = try! writer.sync.exportPending()
        reader = NoteDevice(
            at: directory.appendingPathComponent("reader-\(count).sqlite"),
            container: container,
            device: "reader"
        )
        reader.receive()
    }

    /// The writer's one-shot save of a new note, exported.
    func save() {
        writer.addNotes(1, to: folder)
        _ = try! writer.sync.exportPending()
    }
}

/// The median of `rounds` timings of `measured` (ns), each after `prepare` (not timed), after one
/// round that warms the caches.
private func medianTime(_ rounds: Int, prepare: () -> Void = {}, _ measured: () -> Void) -> UInt64 {
    prepare()
    measured()
    var times: [UInt64] = []
    for _ in 0..<rounds {
        prepare()
        times.append(nanoseconds(measured))
    }
    return times.sorted()[rounds / 2]
}

func changeCostSyncBenchmarks(_ scratch: Scratch) {
    let configuration = Benchmark.Configuration(
        metrics: [syncChangeCostRatio],
        maxDuration: .seconds(300),
        maxIterations: 3
    )
    /// The two pairs, made the first time a benchmark asks (a filtered run does not pay for them).
    let pairs = LazyNotePairs(scratch.fresh("change-cost").deletingLastPathComponent())
    /// A row: `measure` (a median time) on the large pair against the small one.
    func row(_ name: String, _ measure: @escaping @Sendable (NotePair) -> UInt64) {
        Benchmark("Change cost sync \(name) 100k vs 1k", configuration: configuration) { benchmark in
            let (small, large) = pairs.value
            for _ in benchmark.scaledIterations {
                let one = measure(small)
                let hundred = measure(large)
                benchmark.measurement(syncChangeCostRatio, Int(hundred * 100 / max(one, 1)))
            }
        }
    }
    row("arriving one-note log") { pair in medianTime(9, prepare: pair.save) { pair.reader.receive() } }
    row("one-shot save") { pair in medianTime(9) { pair.save() } }
    row("idle pass") { pair in
        medianTime(9, prepare: { pair.reader.receive() }) { _ = try! pair.reader.sync.importAvailable() }
    }
}

/// The two pairs, made once, on first use.
private final class LazyNotePairs: @unchecked Sendable {
    private let directory: URL
    private let lock = NSLock()
    private var made: (NotePair, NotePair)?

    init(_ directory: URL) { self.directory = directory }

    var value: (NotePair, NotePair) {
        lock.withLock {
            if let made { return made }
            let pair = (NotePair(in: directory, count: 1_000), NotePair(in: directory, count: 100_000))
            made = pair
            return pair
        }
    }
}

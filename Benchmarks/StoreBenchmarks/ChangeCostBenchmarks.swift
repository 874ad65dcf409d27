// Per-change cost against store size (issue "Cost follows what changed"): a one-record save in an
// SQLite store whose one folder holds 1,000 notes and one whose folder holds 100,000, in the same
// run. Rows are the 100k form's median save as a ratio to the 1k form's (x100: 100 is flat, the
// goal is at most 150):
// - adding a note to the folder (the folder's side of the relationship changes too),
// - editing one field of a note (nothing else changes).
import Benchmark
import Dispatch
import Foundation
import Persistence
import SQLiteStore

private let changeCostSchema = try! Schema(
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

private let changeCostRatio = BenchmarkMetric.custom(
    "100k records / 1k records (x100)",
    polarity: .prefersSmaller,
    useScalingFactor: false
)

/// An SQLite store whose one folder holds `count` notes, on a coordinator of its own.
private final class FolderStore: @unchecked Sendable {
    let coordinator: StoreCoordinator
    let folder: ObjectID
    let someNote: ObjectID
    private var edits = 0

    init(at url: URL, count: Int) {
        let registry = StoreRegistry()
        registry.register(SQLiteStore.self)
        coordinator = StoreCoordinator(schema: changeCostSchema, registry: registry)
        let store = try! coordinator.addStore(ofType: "sqlite", at: url, options: StoreOptions(presentsFiles: false))
        folder = .random(entity: "Folder")
        let notes = (0..<count).map { _ in ObjectID.random(entity: "Note") }
        someNote = notes[count / 2]
        var folderRecord = Record(id: folder)
        folderRecord.values["name"] = .string("Inbox")
        folderRecord.toMany["notes"] = Set(notes)
        // Written directly, in one commit: the setup is not what is measured.
        let records =
            [folderRecord]
            + notes.enumerated().map { index, id in
                var note = Record(id: id)
                note.values["title"] = .string("note \(index)")
                note.toOne["folder"] = folder
                return note
            }
        try! store.commit(StoreChanges(inserts: records))
    }

    /// A new note in the folder, saved alone.
    func addNote() {
        let context = ObjectContext(coordinator: coordinator, origin: .local)
        var note = try! context.insert(entity: "Note", values: ["title": .string("new")])
        note.toOne["folder"] = folder
        try! context.update(note)
        try! context.save()
    }

    /// One field of one note, saved alone.
    func editNote() {
        edits += 1
        let context = ObjectContext(coordinator: coordinator, origin: .local)
        var note = try! context.record(with: someNote)!
        note.values["title"] = .string("edit \(edits)")
        try! context.update(note)
        try! context.save()
    }
}

/// The median of `rounds` timings of `body` (ns), after one round that warms the caches.
private func median(_ rounds: Int, _ body: () -> Void) -> UInt64 {
    body()
    var times: [UInt64] = []
    for _ in 0..<rounds {
        let start = DispatchTime.now().uptimeNanoseconds
        body()
        times.append(DispatchTime.now().uptimeNanoseconds - start)
    }
    return times.sorted()[rounds / 2]
}

func changeCostBenchmarks() {
    let directory = URL(fileURLWithPath: NSTemporaryDirectory())
        .appendingPathComponent("change-cost-bench-\(UUID().uuidString)")
    let configuration = Benchmark.Configuration(
        metrics: [changeCostRatio],
        maxDuration: .seconds(120),
        maxIterations: 3
    )
    /// The two stores, made the first time a benchmark asks (a filtered run does not pay for them).
    let stores = LazyPair {
        try! FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return (
            FolderStore(at: directory.appendingPathComponent("small.sqlite"), count: 1_000),
            FolderStore(at: directory.appendingPathComponent("large.sqlite"), count: 100_000)
        )
    }
    /// A row: `change` on the large store against the small one.
    func row(_ name: String, _ change: @escaping @Sendable (FolderStore) -> Void) {
        Benchmark("Change cost SQLite \(name) 100k vs 1k", configuration: configuration) { benchmark in
            let (small, large) = stores.value
            for _ in benchmark.scaledIterations {
                let one = median(9) { change(small) }
                let hundred = median(9) { change(large) }
                benchmark.measurement(changeCostRatio, Int(hundred * 100 / max(one, 1)))
            }
        }
    }
    row("add a note to a folder") { $0.addNote() }
    row("edit one field") { $0.editNote() }
}

/// A pair made once, on first use.
private final class LazyPair<A, B>: @unchecked Sendable {
    private let make: () -> (A, B)
    private let lock = NSLock()
    private var made: (A, B)?

    init(_ make: @escaping () -> (A, B)) { self.make = make }

    var value: (A, B) {
        lock.lock()
        defer { lock.unlock() }
        if let made { return made }
        let pair = make()
        made = pair
        return pair
    }
}

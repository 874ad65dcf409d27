// The live-sync command for MultiProcessSyncTests.
//
//   sync-edit TYPE SCHEMA_JSON STORE CONTAINER DEVICE OTHER_DEVICE STATUS_DIR SEED EDITS
//
// Opens the store (TYPE: sqlite, json, plist) with the schema from SCHEMA_JSON (Folder, Note,
// Tag), syncs it live through CONTAINER as DEVICE, says "ready", makes EDITS random saves (drawn
// from SEED: inserts, updates, deletes, relationship changes) while importing what the other
// process writes, then waits for its own exports, writes STATUS_DIR/DEVICE.done holding its last
// log sequence and says "done SEQ". It then waits (bounded, woken by inotify and sync events) for
// STATUS_DIR/OTHER_DEVICE.done and for every log up to that sequence to be applied, says
// "synced", stops and closes the store. Failures go to standard error; a failed save is
// reported as "save-failed MESSAGE" and editing goes on.
import FileWatching
import FolderSync
import Foundation
import Persistence
import Synchronization

/// SplitMix64: the same seed makes the same edits.
struct SeededRandom {
    var state: UInt64
    init(seed: UInt64) { state = seed &* 0x9E37_79B9_7F4A_7C15 &+ 1 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(max(n, 1))) }
    mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
    mutating func pick<T>(_ items: [T]) -> T? { items.isEmpty ? nil : items[below(items.count)] }
}

/// A one-shot condition that threads signal and the main thread waits on, with a deadline.
final class Wakeup: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    func signal() { semaphore.signal() }
    /// Waits for a signal or the deadline; `false` when the deadline passed.
    func wait(until deadline: DispatchTime) -> Bool { semaphore.wait(timeout: deadline) == .success }
}

func runSyncEdit(_ arguments: [String]) {
    guard arguments.count == 10, let seed = UInt64(arguments[8]), let edits = Int(arguments[9]) else {
        fail("usage: sync-edit TYPE SCHEMA_JSON STORE CONTAINER DEVICE OTHER_DEVICE STATUS_DIR SEED EDITS")
    }
    let (type, device, other) = (arguments[1], arguments[5], arguments[6])
    let statusFolder = URL(fileURLWithPath: arguments[7])
    do {
        let schema = try JSONDecoder().decode(Schema.self, from: Data(contentsOf: URL(fileURLWithPath: arguments[2])))
        let coordinator = StoreCoordinator(schema: schema, registry: storeRegistry())
        for entity in schema.entities { coordinator.policies.register(ClearMissingReferences(entityName: entity.name)) }
        let store = try coordinator.addStore(
            ofType: type, at: URL(fileURLWithPath: arguments[3]), options: StoreOptions(presentsFiles: false))
        let sync = try FolderSync(
            coordinator: coordinator, store: store, container: URL(fileURLWithPath: arguments[4]), storeName: "notes",
            deviceID: device, settleInterval: .milliseconds(500))
        let wakeup = Wakeup()
        let observer = NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: sync, queue: nil) { note in
            if case .failed(let message)? = note.userInfo?["event"] as? SyncEvent {
                FileHandle.standardError.write(Data("ConcordTestHelper \(device): \(message)\n".utf8))
            }
            wakeup.signal()
        }
        defer { NotificationCenter.default.removeObserver(observer) }
        try sync.start()
        say("ready")

        var random = SeededRandom(seed: seed)
        for _ in 0..<edits {
            do {
                try edit(coordinator, &random)
            } catch {
                say("save-failed \(error)")
            }
        }
        sync.waitForQueuedWork()
        let last = try sync.lastLocalSequence()
        try Data(String(last).utf8).write(to: statusFolder.appendingPathComponent("\(device).done"), options: .atomic)
        say("done \(last)")

        // The other side's last sequence, when it has written it; woken by the status folder's watch.
        let watcher = try InotifyWatcher(settleWindow: .zero)
        defer { watcher.stop() }
        let watch = try watcher.watch(statusFolder, recursive: false) { _ in wakeup.signal() }
        defer { watch.cancel() }
        let deadline = DispatchTime.now() + .seconds(120)
        let otherDone = statusFolder.appendingPathComponent("\(other).done")
        var target: UInt64?
        while true {
            if target == nil, let text = try? String(contentsOf: otherDone, encoding: .utf8) { target = UInt64(text) }
            if let target, try sync.importedThrough(device: other) >= target { break }
            guard wakeup.wait(until: deadline) else {
                fail("timed out: other side's last log \(target.map(String.init) ?? "unknown"), applied through \((try? sync.importedThrough(device: other)) ?? 0)")
            }
        }
        sync.stop()
        sync.waitForQueuedWork()
        say("synced")
        coordinator.removeStore(store)
    } catch {
        fail("sync-edit failed: \(error)")
    }
}

/// One random save of one to three changes.
private func edit(_ coordinator: StoreCoordinator, _ random: inout SeededRandom) throws {
    let context = ObjectContext(coordinator: coordinator, origin: .local, name: "edit")
    let folders = try context.fetch(FetchRequest(entity: "Folder"))
    let notes = try context.fetch(FetchRequest(entity: "Note"))
    let tags = try context.fetch(FetchRequest(entity: "Tag"))
    for _ in 0..<(1 + random.below(3)) {
        switch random.below(12) {
        case 0: try context.insert(entity: "Folder", values: ["name": .string("f\(random.below(100))")])
        case 1, 2:
            var note = try context.insert(entity: "Note", values: ["title": .string("n\(random.below(1000))")])
            if let folder = random.pick(folders), try context.record(with: folder.id) != nil {
                note.toOne["folder"] = folder.id
                try context.update(note)
            }
        case 3: try context.insert(entity: "Tag", values: ["label": .string("t\(random.below(20))")])
        case 4, 5:
            if let note = random.pick(notes), var current = try context.record(with: note.id) {
                current["title"] = .string("n\(random.below(1000))")
                if random.chance(50) { current["rank"] = .integer(Int64(random.below(10))) }
                try context.update(current)
            }
        case 6:
            if let note = random.pick(notes), var current = try context.record(with: note.id) {
                let folder = random.chance(80) ? random.pick(folders)?.id : nil
                current.toOne["folder"] = try folder.flatMap { try context.record(with: $0) }?.id
                try context.update(current)
            }
        case 7, 8:
            if let note = random.pick(notes), let tag = random.pick(tags), var current = try context.record(with: note.id),
                try context.record(with: tag.id) != nil
            {
                var set = current.toMany["tags"] ?? []
                if set.contains(tag.id) { set.remove(tag.id) } else { set.insert(tag.id) }
                current.toMany["tags"] = set.isEmpty ? nil : set
                try context.update(current)
            }
        case 9:
            if let folder = random.pick(folders), var current = try context.record(with: folder.id) {
                current["name"] = .string("f\(random.below(100))")
                try context.update(current)
            }
        case 10:
            if let note = random.pick(notes), try context.record(with: note.id) != nil { try context.delete(note.id) }
        default:
            if random.chance(40), let folder = random.pick(folders), try context.record(with: folder.id) != nil {
                try context.delete(folder.id)
            } else if let tag = random.pick(tags), try context.record(with: tag.id) != nil {
                try context.delete(tag.id)
            }
        }
    }
    try context.save()
}

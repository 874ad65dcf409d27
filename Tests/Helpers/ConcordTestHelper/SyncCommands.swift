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
import SyncTestKit
import Synchronization

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
            ofType: type,
            at: URL(fileURLWithPath: arguments[3]),
            options: StoreOptions(presentsFiles: false)
        )
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: URL(fileURLWithPath: arguments[4]),
            storeName: "notes",
            deviceID: device,
            settleInterval: .milliseconds(500)
        )
        let wakeup = Wakeup()
        let observer = NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: sync, queue: nil) {
            note in
            if case .failed(let message)? = note.userInfo?["event"] as? SyncEvent {
                FileHandle.standardError.write(Data("ConcordTestHelper \(device): \(message)\n".utf8))
            }
            wakeup.signal()
        }
        defer { NotificationCenter.default.removeObserver(observer) }
        try sync.start()
        say("ready")

        var random = SimulationRandom(seed: seed)
        for _ in 0..<edits {
            do {
                try SyncSimulator.saveRandomEdits(in: coordinator, random: &random)
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
                fail(
                    "timed out: other side's last log \(target.map(String.init) ?? "unknown"), applied through \((try? sync.importedThrough(device: other)) ?? 0)"
                )
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

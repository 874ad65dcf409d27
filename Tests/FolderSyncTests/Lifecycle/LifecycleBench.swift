import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Synchronization
import Testing

/// Devices that share one container directory, each with its own store, for lifecycle tests
/// (enable, pause, reset, availability) with live sync and real inotify.
final class LifecycleBench: @unchecked Sendable {
    let directory = TemporaryDirectory("lifecycle")
    let registry = StoreRegistry()
    let container: URL
    var devices: [String: Device] = [:]

    final class Device: @unchecked Sendable {
        let name: String
        let coordinator: StoreCoordinator
        let store: any PersistentStore
        let sync: FolderSync
        let events: SyncEventWaiter
        let delegate = RecordingDelegate()

        init(name: String, coordinator: StoreCoordinator, store: any PersistentStore, sync: FolderSync) {
            self.name = name
            self.coordinator = coordinator
            self.store = store
            self.sync = sync
            events = SyncEventWaiter(sync)
            sync.delegate = delegate
        }

        /// Inserts a note titled `title` in a local save.
        @discardableResult
        func addNote(_ title: String) throws -> ObjectID {
            let context = ObjectContext(coordinator: coordinator)
            let note = try context.insert(entity: "Note", values: ["title": .string(title)])
            try context.save()
            return note.id
        }

        /// Runs `body` in a local context and saves it.
        func edit(_ body: (ObjectContext) throws -> Void) throws {
            let context = ObjectContext(coordinator: coordinator)
            try body(context)
            try context.save()
        }

        /// The titles of the notes in the store, sorted.
        func titles() throws -> [String] {
            try store.fetch(FetchRequest(entity: "Note")).compactMap { $0["title"].stringValue }.sorted()
        }

        /// Waits until the store's note titles are `expected`.
        func waitForTitles(_ expected: [String], timeout: Duration = .seconds(20)) -> Bool {
            events.wait(timeout: timeout) { _ in (try? self.titles()) == expected }
        }
    }

    init(_ label: String = "lifecycle") {
        registry.register(SimulatedStore.self)
        container = directory.url.appendingPathComponent("container", isDirectory: true)
        try? FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
    }

    /// A device with its own store holding `notes` from before sync; `container` overrides the
    /// shared one; its wall clock runs `clockAhead` milliseconds ahead of the real one.
    @discardableResult
    func addDevice(
        _ name: String,
        container: URL? = nil,
        notes: [String] = [],
        clockAhead: UInt64 = 0,
        sentinel: (@Sendable (ContainerLayout) -> any SyncSentinel)? = nil
    ) throws -> Device {
        let coordinator = StoreCoordinator(schema: SyncSimulator.schema, registry: registry)
        let store = try coordinator.addStore(
            ofType: "simulated",
            at: directory.makeDirectory("stores").appendingPathComponent("\(name).json"),
            options: StoreOptions(presentsFiles: false)
        )
        // Data the store held before sync was set up.
        if !notes.isEmpty {
            let context = ObjectContext(coordinator: coordinator)
            for title in notes { try context.insert(entity: "Note", values: ["title": .string(title)]) }
            try context.save()
        }
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: container ?? self.container,
            storeName: "notes",
            deviceID: name,
            settleInterval: .milliseconds(200),
            wallClock: { UInt64(Date().timeIntervalSince1970 * 1000) + clockAhead },
            sentinel: sentinel
        )
        sync.availabilityCheckInterval = .milliseconds(50)
        let device = Device(name: name, coordinator: coordinator, store: store, sync: sync)
        devices[name] = device
        return device
    }

    subscript(name: String) -> Device { devices[name]! }

    /// `name`'s store is lost (a new machine, a wiped disk): its sync stops, its file goes, and a
    /// fresh store holding `notes` takes its place under the same device name.
    @discardableResult
    func loseStore(_ name: String, notes: [String] = []) throws -> Device {
        let old = self[name]
        old.sync.stop()
        old.coordinator.removeStore(old.store)
        try FileManager.default.removeItem(
            at: directory.url.appendingPathComponent("stores").appendingPathComponent("\(name).json")
        )
        return try addDevice(name, notes: notes)
    }

    /// Runs `body` while the container's identity file is out of sight (a sync engine delivers
    /// it later, or is replacing it), then puts it back.
    @discardableResult
    func withoutIdentity<T>(_ body: () throws -> T) throws -> T {
        let identity = container.appendingPathComponent("notes/container.plist")
        let aside = directory.url.appendingPathComponent("container.plist")
        try FileManager.default.moveItem(at: identity, to: aside)
        let result = try body()
        try FileManager.default.moveItem(at: aside, to: identity)
        return result
    }

    /// A bench whose devices `names` (each with its own store, in that order) have enabled sync.
    static func syncing(_ names: String...) throws -> LifecycleBench {
        let bench = LifecycleBench()
        for name in names { try bench.addDevice(name) }
        for name in names { #expect(try bench[name].sync.enable().state == .syncing) }
        return bench
    }

    /// A bench whose devices `names` have enabled sync without live sync: the test exports,
    /// imports and compacts by hand.
    static func syncingByHand(_ names: String...) throws -> LifecycleBench {
        let bench = LifecycleBench()
        for name in names {
            try bench.addDevice(name)
            #expect(try bench[name].sync.enable(live: false).state == .syncing)
        }
        return bench
    }

    deinit {
        for device in devices.values { device.sync.stop() }
    }
}

/// Records every event one ``FolderSync`` posts (synchronously, through NotificationCenter) and
/// lets a test wait, with a bound, until a condition holds. The condition is re-evaluated on each
/// event and every 20 ms (for conditions on the store that no event of this sync announces).
final class SyncEventWaiter: @unchecked Sendable {
    private let condition = NSCondition()
    private var recorded: [SyncEvent] = []
    private var token: (any NSObjectProtocol)?

    init(_ sync: FolderSync) {
        token = NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: sync, queue: nil) {
            [weak self] note in
            guard let self, let event = note.userInfo?["event"] as? SyncEvent else { return }
            condition.lock()
            recorded.append(event)
            condition.broadcast()
            condition.unlock()
        }
    }

    deinit { if let token { NotificationCenter.default.removeObserver(token) } }

    var events: [SyncEvent] {
        condition.lock()
        defer { condition.unlock() }
        return recorded
    }

    func reset() {
        condition.lock()
        recorded.removeAll()
        condition.unlock()
    }

    /// Waits until `predicate` holds for the events so far, within `timeout`.
    @discardableResult
    func wait(timeout: Duration = .seconds(20), until predicate: ([SyncEvent]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(
            Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        )
        // The predicate runs unlocked: it may read this waiter, the store or the sync.
        var seen = events.count
        while !predicate(events) {
            if Date() >= deadline { return false }
            condition.lock()
            if recorded.count == seen { _ = condition.wait(until: min(deadline, Date().addingTimeInterval(0.02))) }
            seen = recorded.count
            condition.unlock()
        }
        return true
    }

    /// The resets reported so far.
    var resets: [ContainerResetReason] {
        events.compactMap { if case .containerReset(let reason) = $0 { return reason } else { return nil } }
    }

    /// The joins reported so far.
    var joins: [SyncJoin] {
        events.compactMap { if case .enabled(let join) = $0 { return join } else { return nil } }
    }

    /// The availability problems reported so far.
    var unavailable: [ContainerAvailability] {
        events.compactMap {
            if case .containerUnavailable(let availability) = $0 { return availability } else { return nil }
        }
    }
}

/// A delegate that counts what it is told.
final class RecordingDelegate: FolderSyncDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var _resets: [ContainerResetReason] = []
    private var _states: [SyncState] = []
    var resets: [ContainerResetReason] { lock.withLock { _resets } }
    var states: [SyncState] { lock.withLock { _states } }

    func folderSync(_ sync: FolderSync, didStopAfterReset reason: ContainerResetReason) {
        lock.withLock { _resets.append(reason) }
    }

    func folderSync(_ sync: FolderSync, didChangeState state: SyncState) {
        lock.withLock { _states.append(state) }
    }
}

/// Counts the ``Foundation/Notification/Name/concordSyncContainerReset`` posts of one sync.
final class ResetNotificationCounter: @unchecked Sendable {
    private let count = Mutex(0)
    private var token: (any NSObjectProtocol)?

    init(_ sync: FolderSync) {
        token = NotificationCenter.default.addObserver(forName: .concordSyncContainerReset, object: sync, queue: nil) {
            [weak self] _ in
            self?.count.withLock { $0 += 1 }
        }
    }

    deinit { if let token { NotificationCenter.default.removeObserver(token) } }

    var value: Int { count.withLock { $0 } }
}

extension Value {
    var stringValue: String? {
        if case .string(let text) = self { return text }
        return nil
    }
}

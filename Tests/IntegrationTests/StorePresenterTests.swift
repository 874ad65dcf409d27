import ConcordSystem
import ConcordTestSupport
import Foundation
import JSONStore
import Persistence
import PlistStore
import SQLiteStore
import Testing

/// Stores present their files: another process's commits, moves and deletions (through the
/// helper process's `store-*` commands) reach an open store in this process as events, and the
/// store follows them.
@Suite("Stores follow other processes' changes, moves and deletions", .serialized)
struct StorePresenterTests {
    let directory = TemporaryDirectory("store-presenter")

    static let registry: StoreRegistry = {
        let registry = StoreRegistry()
        registry.register(JSONStore.self)
        registry.register(PlistStore.self)
        registry.register(SQLiteStore.self)
        return registry
    }()

    /// The one schema: the helper reads it from the JSON file ``schemaFile()`` writes.
    static let schema = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Item",
                attributes: [
                    AttributeDescription("title", .string),
                    AttributeDescription("number", .integer, isOptional: true),
                ]
            )
        ]
    )

    static let plugins = ["json", "plist", "sqlite"]

    static func fileName(_ type: String) -> String { "store.\(type)" }

    /// Writes the schema where the helper can read it.
    func schemaFile() throws -> URL {
        let url = directory("schema.json")
        try JSONEncoder().encode(Self.schema).write(to: url)
        return url
    }

    /// Runs the helper once, until it says "done" and exits with 0.
    func helper(_ arguments: String...) {
        do {
            let child = try ChildProcess(arguments)
            #expect(child.waitForLine("done", timeout: .seconds(60)), "helper \(arguments) did not finish")
            #expect(child.waitForExit() == 0, "helper \(arguments) failed")
        } catch {
            Issue.record("cannot start the helper: \(error)")
        }
    }

    /// Opens a presenting store of `type` at `url`.
    func open(_ type: String, at url: URL, presents: Bool = true) throws -> any PersistentStore {
        try Self.registry.storeType(named: type).init(
            url: url,
            schema: Self.schema,
            options: StoreOptions(presentsFiles: presents)
        )
    }

    static func isMove(_ event: StoreEvent) -> Bool {
        if case .moved = event.kind { return true }
        return false
    }

    static func titles(_ store: any PersistentStore) throws -> Set<String> {
        Set(
            try store.fetch(FetchRequest(entity: "Item")).compactMap { record -> String? in
                if case .string(let title) = record["title"] { return title }
                return nil
            }
        )
    }

    @Test(
        "Another process's commit reaches the open store as changedExternally, and fetches see it",
        arguments: plugins
    )
    func changedExternally(_ type: String) throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let url = directory(Self.fileName(type))
        let store = try open(type, at: url)
        defer { store.close() }
        try store.commit(StoreChanges(inserts: [Record(id: .random(entity: "Item"), values: ["title": "mine"])]))
        let log = StoreEventLog(store.events)

        helper("store-insert", type, try schemaFile().path, url.path, "3")
        #expect(log.wait { $0.kind == .changedExternally } != nil, "\(type): no changedExternally; events: \(log.all)")
        #expect(try Self.titles(store) == ["mine", "helper 0", "helper 1", "helper 2"])
        #expect(!log.all.contains { $0.kind == .removed || Self.isMove($0) })
    }

    @Test(
        "A coordinated move by another process is followed: moved event, new url, commits land in the new file",
        arguments: plugins
    )
    func moved(_ type: String) throws {
        try checkMove(type, to: directory("renamed.\(type)"))
    }

    @Test("A coordinated move into another directory is followed too", arguments: plugins)
    func movedToAnotherDirectory(_ type: String) throws {
        try checkMove(type, to: directory.makeDirectory("elsewhere").appendingPathComponent("renamed.\(type)"))
    }

    func checkMove(_ type: String, to destination: URL) throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let url = directory(Self.fileName(type))
        let store = try open(type, at: url)
        defer { store.close() }
        try store.commit(StoreChanges(inserts: [Record(id: .random(entity: "Item"), values: ["title": "before"])]))
        let log = StoreEventLog(store.events)

        helper("store-move", type, url.path, destination.path)
        let event = log.wait(for: Self.isMove)
        #expect(event != nil, "\(type): no moved event; events: \(log.all)")
        if case .moved(let from, let to)? = event?.kind {
            #expect(from.standardizedFileURL.path == url.path)
            #expect(to.standardizedFileURL.path == destination.path)
        }
        #expect(store.url.standardizedFileURL.path == destination.path)

        try store.commit(StoreChanges(inserts: [Record(id: .random(entity: "Item"), values: ["title": "after"])]))
        #expect(try Self.titles(store) == ["before", "after"])
        store.close()
        let storeType = try Self.registry.storeType(named: type)
        for file in storeType.files(at: url) {
            #expect(
                !FileManager.default.fileExists(atPath: file.path),
                "\(type): \(file.lastPathComponent) left at the old place"
            )
        }
        let reopened = try open(type, at: destination, presents: false)
        defer { reopened.close() }
        #expect(try Self.titles(reopened) == ["before", "after"])
        #expect(!log.all.contains { $0.kind == .removed })
    }

    @Test(
        "A coordinated deletion by another process tears the store down: removed event, calls throw storeRemoved",
        arguments: plugins
    )
    func removed(_ type: String) throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let url = directory(Self.fileName(type))
        let store = try open(type, at: url)
        defer { store.close() }
        try store.commit(StoreChanges(inserts: [Record(id: .random(entity: "Item"), values: ["title": "doomed"])]))
        let log = StoreEventLog(store.events)

        helper("store-delete", type, url.path)
        #expect(log.wait { $0.kind == .removed } != nil, "\(type): no removed event; events: \(log.all)")
        for (call, body) in [
            ("fetch", { _ = try store.fetch(FetchRequest(entity: "Item")) }),
            ("count", { _ = try store.count(for: FetchRequest(entity: "Item")) }),
            ("metadata", { _ = try store.metadata() }),
            (
                "commit",
                {
                    try store.commit(
                        StoreChanges(inserts: [Record(id: .random(entity: "Item"), values: ["title": "late"])])
                    )
                }
            ),
        ] as [(String, () throws -> Void)] {
            do {
                try body()
                Issue.record("\(type): \(call) after the deletion did not throw")
            } catch let error as PersistenceError {
                #expect(error.code == .storeRemoved, "\(type): \(call) threw \(error)")
            } catch {
                Issue.record("\(type): \(call) threw \(error), not a PersistenceError")
            }
        }
        for file in try Self.registry.storeType(named: type).files(at: url) {
            #expect(!FileManager.default.fileExists(atPath: file.path), "\(type): \(file.lastPathComponent) came back")
        }
    }

    @Test(
        "A store coordinator relays the events (listener, events(), NotificationCenter) and drops a deleted store",
        arguments: plugins
    )
    func coordinatorRelays(_ type: String) async throws {
        WatchLimitLock.beginShared()
        defer { WatchLimitLock.endShared() }
        let url = directory(Self.fileName(type))
        let coordinator = StoreCoordinator(schema: Self.schema, registry: Self.registry)
        let store = try coordinator.addStore(ofType: type, at: url)
        try store.commit(StoreChanges(inserts: [Record(id: .random(entity: "Item"), values: ["title": "mine"])]))

        let fromSequence = StoreEventLog()
        let stream = coordinator.events()
        let reader = Task {
            for await event in stream { fromSequence.append(event) }
        }
        defer { reader.cancel() }
        let fromNotifications = StoreEventLog()
        let observer = NotificationCenter.default.addObserver(
            forName: .concordStoresDidChange,
            object: coordinator,
            queue: nil
        ) { notification in
            if let event = notification.userInfo?["event"] as? StoreEvent { fromNotifications.append(event) }
        }
        defer { NotificationCenter.default.removeObserver(observer) }

        helper("store-insert", type, try schemaFile().path, url.path, "2")
        // The reader task needs the cooperative pool: wait on a thread of our own, never block it.
        #expect(
            await offThePool { fromSequence.wait { $0.kind == .changedExternally } } != nil,
            "\(type): events() saw \(fromSequence.all)"
        )
        #expect(
            fromNotifications.wait { $0.kind == .changedExternally } != nil,
            "\(type): notifications saw \(fromNotifications.all)"
        )
        #expect(try Self.titles(coordinator.store(forEntity: "Item")) == ["mine", "helper 0", "helper 1"])

        helper("store-delete", type, url.path)
        #expect(
            await offThePool { fromSequence.wait { $0.kind == .removed } } != nil,
            "\(type): events() saw \(fromSequence.all)"
        )
        #expect(
            fromNotifications.wait { $0.kind == .removed } != nil,
            "\(type): notifications saw \(fromNotifications.all)"
        )
        #expect(fromSequence.all.first { $0.kind == .removed }?.url.standardizedFileURL.path == url.path)
        #expect(coordinator.stores.isEmpty)
        #expect(throws: PersistenceError.self) { try coordinator.store(forEntity: "Item") }
    }
}

/// Collects a store's (or anyone's) events and lets a test wait for one, with a bound.
/// Runs a blocking wait on a thread of its own, so an async test never holds one of the few
/// threads of Swift's cooperative pool (two here) that the tasks it waits for need.
func offThePool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}

final class StoreEventLog: @unchecked Sendable {
    private let condition = ConditionLock()
    private var events: [StoreEvent] = []
    private var channel: StoreEventChannel?
    private var token: UInt64?

    init() {}

    /// Listens to `channel` until the log goes away.
    init(_ channel: StoreEventChannel) {
        self.channel = channel
        token = channel.addListener { [weak self] event in self?.append(event) }
    }

    deinit {
        if let channel, let token { channel.removeListener(token) }
    }

    func append(_ event: StoreEvent) {
        condition.withLock {
            events.append(event)
            condition.broadcast()
        }
    }

    /// Everything so far.
    var all: [StoreEvent] { condition.withLock { events } }

    /// The first event matching `predicate`, waiting up to `timeout` for it.
    func wait(timeout: Duration = .seconds(20), for predicate: (StoreEvent) -> Bool) -> StoreEvent? {
        let deadline = Deadline.after(timeout)
        return condition.withLock {
            while true {
                if let event = events.first(where: predicate) { return event }
                if !condition.wait(until: deadline) { return events.first(where: predicate) }
            }
        }
    }
}

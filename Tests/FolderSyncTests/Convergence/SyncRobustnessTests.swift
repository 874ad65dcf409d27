import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Synchronization
import Testing

/// A whole-file store whose commits can be made to fail, to simulate a crash in the middle of a
/// write: arm ``FlakyFormat/failNextCommits(_:key:)`` with the key its options carry.
typealias FlakyStore = WholeFileStore<FlakyFormat>

/// JSON of the snapshot, failing on demand.
enum FlakyFormat: StoreFileFormat {
    static let failures = Mutex<[String: Int]>([:])
    static let conditions = Mutex<[String: [@Sendable ([Record]) -> Bool]]>([:])
    static let settingKey = "test.flaky-key"

    static var storeType: String { "flaky" }

    /// Makes the next `count` commits of the store opened with `key` fail.
    static func failNextCommits(_ count: Int, key: String) { failures.withLock { $0[key] = count } }

    /// Makes the first commit of the store opened with `key` whose records satisfy `condition`
    /// fail (once for each call, in the order of the calls).
    static func failCommit(key: String, where condition: @escaping @Sendable ([Record]) -> Bool) {
        conditions.withLock { $0[key, default: []].append(condition) }
    }

    static func encode(_ snapshot: StoreSnapshot, options: StoreOptions) throws -> Data {
        if let key = options.settings[settingKey] {
            let fail = failures.withLock { table in
                guard let left = table[key], left > 0 else { return false }
                table[key] = left - 1
                return true
            }
            let records = Array(snapshot.records.values)
            let matched =
                fail
                || conditions.withLock { table in
                    guard let index = table[key]?.firstIndex(where: { $0(records) }) else { return false }
                    table[key]?.remove(at: index)
                    return true
                }
            if matched { throw PersistenceError(.ioFailed, "injected failure: the disk went away") }
        }
        return try JSONEncoder().encode(snapshot)
    }

    static func decode(_ data: Data, url: URL, options: StoreOptions) throws -> StoreSnapshot {
        do { return try JSONDecoder().decode(StoreSnapshot.self, from: data) } catch {
            throw PersistenceError(.corruptStore, "\(error)", url: url)
        }
    }
}

/// Every ``SyncEvent`` one ``FolderSync`` posts, recorded as it is posted (NotificationCenter
/// delivers synchronously on the posting thread, so the record is complete when a sync call returns).
final class SyncEventLog: @unchecked Sendable {
    private let recorded = Mutex<[SyncEvent]>([])
    private var token: (any NSObjectProtocol)?

    init(_ sync: FolderSync) {
        token = NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: sync, queue: nil) {
            [weak self] note in
            guard let event = note.userInfo?["event"] as? SyncEvent else { return }
            self?.recorded.withLock { $0.append(event) }
        }
    }

    deinit { if let token { NotificationCenter.default.removeObserver(token) } }

    var events: [SyncEvent] { recorded.withLock { $0 } }
    func reset() { recorded.withLock { $0.removeAll() } }

    /// The corrupt-log errors reported so far.
    var corrupt: [SyncError] {
        events.compactMap { if case .corruptLog(let error) = $0 { return error } else { return nil } }
    }
    /// The files reported as waiting, event by event.
    var waiting: [Int] {
        events.compactMap { if case .waiting(let files) = $0 { return files } else { return nil } }
    }
    /// The newer-schema reports so far.
    /// The files ``SyncEvent/missingLog(device:sequence:url:)`` named.
    var missing: [URL] {
        events.compactMap { if case .missingLog(_, _, let url) = $0 { return url } else { return nil } }
    }

    /// The files ``SyncEvent/republished(_:)`` named.
    var republished: [URL] {
        events.compactMap { if case .republished(let url) = $0 { return url } else { return nil } }
    }

    var newerSchema: [(device: String, version: Int)] {
        events.compactMap {
            if case .newerSchemaFound(let device, let version) = $0 { return (device, version) } else { return nil }
        }
    }
}

/// Devices for robustness scenarios: each has its own store and its own view of the container
/// (as a file-sync engine gives each machine its own copy); the test moves files between views
/// by hand, byte by byte if it likes, and controls the scanner's clock.
final class SyncTestBench {
    final class Device {
        let name: String
        /// The device id its sync runs under: its name, except for a twin (``addTwin(of:as:)``).
        let deviceID: String
        let storeURL: URL
        let view: URL
        let storeType: String
        let flakyKey: String
        var schema: Schema
        var coordinator: StoreCoordinator
        var store: any PersistentStore
        var sync: FolderSync
        var log: SyncEventLog

        init(
            name: String,
            deviceID: String,
            storeURL: URL,
            view: URL,
            storeType: String,
            flakyKey: String,
            schema: Schema,
            coordinator: StoreCoordinator,
            store: any PersistentStore,
            sync: FolderSync
        ) {
            self.name = name
            self.deviceID = deviceID
            self.storeURL = storeURL
            self.view = view
            self.storeType = storeType
            self.flakyKey = flakyKey
            self.schema = schema
            self.coordinator = coordinator
            self.store = store
            self.sync = sync
            log = SyncEventLog(sync)
        }
    }

    static let storeName = "notes"
    static let settle: Duration = .seconds(30)

    let directory = TemporaryDirectory("sync-robust")
    let registry = StoreRegistry()
    let time = SimulatedTime()
    var devices: [String: Device] = [:]

    init() {
        registry.register(SimulatedStore.self)
        registry.register(FlakyStore.self)
    }

    subscript(name: String) -> Device { devices[name]! }

    @discardableResult
    func addDevice(_ name: String, schema: Schema = SyncSimulator.schema, flaky: Bool = false) throws -> Device {
        let storeURL = directory.makeDirectory("stores").appendingPathComponent("\(name).json")
        let view = directory.makeDirectory("views", name)
        let storeType = flaky ? FlakyStore.storeType : SimulatedStore.storeType
        let key = "\(name)-\(UUID().uuidString)"
        let (coordinator, store, sync) = try open(
            deviceID: name,
            storeURL: storeURL,
            view: view,
            storeType: storeType,
            key: key,
            schema: schema
        )
        let device = Device(
            name: name,
            deviceID: name,
            storeURL: storeURL,
            view: view,
            storeType: storeType,
            flakyKey: key,
            schema: schema,
            coordinator: coordinator,
            store: store,
            sync: sync
        )
        devices[name] = device
        return device
    }

    func open(
        deviceID: String,
        storeURL: URL,
        view: URL,
        storeType: String,
        key: String,
        schema: Schema
    ) throws -> (StoreCoordinator, any PersistentStore, FolderSync) {
        let coordinator = StoreCoordinator(schema: schema, registry: registry)
        for entity in ["Note", "Tag", "Folder"] {
            coordinator.policies.register(ClearMissingReferences(entityName: entity))
        }
        let store = try coordinator.addStore(
            ofType: storeType,
            at: storeURL,
            options: StoreOptions(presentsFiles: false, settings: [FlakyFormat.settingKey: key])
        )
        let time = self.time
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: view,
            storeName: Self.storeName,
            deviceID: deviceID,
            settleInterval: Self.settle,
            wallClock: { time.now },
            now: { Date(timeIntervalSince1970: Double(time.now) / 1000) }
        )
        return (coordinator, store, sync)
    }

    /// The process dies and starts again (with `schema`, if given: an app upgrade): the store
    /// and sync are opened afresh from what is on disk; nothing in memory survives.
    func restart(_ name: String, schema: Schema? = nil) throws {
        let device = self[name]
        device.coordinator.removeStore(device.store)
        device.store.close()
        let schema = schema ?? device.schema
        let (coordinator, store, sync) = try open(
            deviceID: device.deviceID,
            storeURL: device.storeURL,
            view: device.view,
            storeType: device.storeType,
            key: device.flakyKey,
            schema: schema
        )
        device.schema = schema
        device.coordinator = coordinator
        device.store = store
        device.sync = sync
        device.log = SyncEventLog(sync)
    }

    /// A local save on `name`; exported unless `export` is false. Returns the records `body` made.
    @discardableResult
    func edit(_ name: String, export: Bool = true, _ body: (ObjectContext) throws -> Void) throws -> [Record] {
        let device = self[name]
        time.advance(by: 5)
        let context = ObjectContext(coordinator: device.coordinator, origin: .local, name: name)
        try body(context)
        let changes = try context.save()
        if export { try device.sync.exportPending() }
        return changes.inserted
    }

    /// Inserts a note titled `title` on `name` and exports it as one log.
    @discardableResult
    func addNote(_ name: String, _ title: String, extra: [String: Value] = [:]) throws -> ObjectID {
        try edit(name) { context in
            _ = try context.insert(entity: "Note", values: ["title": .string(title)].merging(extra) { $1 })
        }[0].id
    }

    /// Changes `id`'s attributes on `name` and exports the change as one log.
    func update(_ name: String, _ id: ObjectID, _ values: [String: Value]) throws {
        try edit(name) { context in
            var record = try #require(try context.record(with: id))
            for (key, value) in values { record[key] = value }
            try context.update(record)
        }
    }

    /// Where `author`'s log `sequence` is in `viewer`'s view of the container.
    func logURL(_ author: String, _ sequence: UInt64, in viewer: String) -> URL {
        ContainerLayout(container: self[viewer].view, storeName: Self.storeName).logURL(
            device: author,
            sequence: sequence
        )
    }

    /// The bytes of `author`'s own log `sequence`.
    func logBytes(_ author: String, _ sequence: UInt64) throws -> Data {
        try Data(contentsOf: logURL(author, sequence, in: author))
    }

    /// Writes `bytes` at `name` in `viewer`'s copy of `author`'s folder, as a sync engine would
    /// (through its temporary file and a rename) or, with `atomically: false`, in place.
    func place(_ bytes: Data, name: String, author: String, in viewer: String, atomically: Bool = true) throws {
        let folder = ContainerLayout(container: self[viewer].view, storeName: Self.storeName).deviceFolder(author)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let target = folder.appendingPathComponent(name)
        if atomically {
            let temporary = folder.appendingPathComponent(".syncthing.\(name).tmp")
            try bytes.write(to: temporary)
            if FileManager.default.fileExists(atPath: target.path) { try FileManager.default.removeItem(at: target) }
            try FileManager.default.moveItem(at: temporary, to: target)
        } else {
            // A non-atomic writer: the same file, opened and truncated, then written.
            _ = FileManager.default.createFile(atPath: target.path, contents: nil)
            let handle = try FileHandle(forWritingTo: target)
            try handle.write(contentsOf: bytes)
            try handle.close()
        }
        // Written now, by the simulated clock the scanners read.
        try FileManager.default.setAttributes(
            [.modificationDate: Date(timeIntervalSince1970: Double(time.now) / 1000)],
            ofItemAtPath: target.path
        )
    }

    /// `name`'s requests for missing logs, as its own folder holds them (`nil`: none).
    func requests(of name: String) throws -> SyncLogRequests? {
        let url = ContainerLayout(container: self[name].view, storeName: Self.storeName).deviceFolder(name)
            .appendingPathComponent(FolderSync.requestsName)
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        return try JSONDecoder().decode(SyncLogRequests.self, from: Data(contentsOf: url))
    }

    /// Delivers `author`'s requests for missing logs (if it has any) to every other device, or
    /// removes them there when it has none.
    func deliverRequests(of author: String) throws {
        let source = ContainerLayout(container: self[author].view, storeName: Self.storeName).deviceFolder(author)
            .appendingPathComponent(FolderSync.requestsName)
        for viewer in devices.keys.sorted() where viewer != author {
            let target = ContainerLayout(container: self[viewer].view, storeName: Self.storeName).deviceFolder(author)
                .appendingPathComponent(FolderSync.requestsName)
            if let bytes = try? Data(contentsOf: source) {
                try place(bytes, name: FolderSync.requestsName, author: author, in: viewer)
            } else if FileManager.default.fileExists(atPath: target.path) {
                try FileManager.default.removeItem(at: target)
            }
        }
    }

    /// Delivers `author`'s logs `sequences` to `viewer`.
    func deliver(_ author: String, _ sequences: [UInt64], to viewer: String) throws {
        for sequence in sequences {
            try place(
                logBytes(author, sequence),
                name: ContainerLayout.logFileName(sequence: sequence),
                author: author,
                in: viewer
            )
        }
    }

    /// Delivers every log every device has written to every other device.
    func deliverEverything() throws {
        for author in devices.keys.sorted() {
            let sequences = try ContainerLayout(container: self[author].view, storeName: Self.storeName).logSequences(
                device: author
            )
            for viewer in devices.keys.sorted() where viewer != author { try deliver(author, sequences, to: viewer) }
        }
    }

    /// `name`'s records, entity by entity, in id order.
    func contents(_ name: String) throws -> [Record] {
        let device = self[name]
        return try device.schema.entities.flatMap { try device.store.fetch(FetchRequest(entity: $0.name)) }
    }

    /// `name`'s note titles, sorted.
    func titles(_ name: String) throws -> [String] {
        try self[name].store.fetch(FetchRequest(entity: "Note")).compactMap {
            if case .string(let title) = $0["title"] { return title } else { return nil }
        }.sorted()
    }

    /// Imports on `name` after the scanner's clock moved by `milliseconds`.
    @discardableResult
    func importOn(_ name: String, after milliseconds: UInt64 = 1_000, batchSize: Int = 64) throws -> ImportReport {
        time.advance(by: milliseconds)
        return try self[name].sync.importAvailable(batchSize: batchSize)
    }
}

@Suite("Sync robustness")
struct SyncRobustnessTests {
    @Test(
        "This device's folder removed from the container while its store folder stays (a replacement arriving file by file): its acknowledgement makes the folder again instead of failing"
    )
    func acknowledgementMakesItsFolderAgain() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        _ = try bench["alpha"].sync.enable(live: false)
        try bench.addNote("alpha", "one")
        let folder = ContainerLayout(container: bench["alpha"].view, storeName: SyncTestBench.storeName)
            .deviceFolder("alpha")
        try FileManager.default.removeItem(at: folder)
        let acknowledgement = try bench["alpha"].sync.publishAcknowledgement()
        #expect(acknowledgement.device == "alpha")
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("applied.json").path))
    }

    @Test("A sync engine's temporary files in a device folder are ignored and never reported")
    func temporaryFilesAreIgnored() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        try bench.addNote("alpha", "one")
        try bench.addNote("alpha", "two")
        try bench.deliver("alpha", [1], to: "beta")
        // Log 2 is on its way: each engine's temporary spelling, holding part of it or all of it.
        let two = try bench.logBytes("alpha", 2)
        let name = ContainerLayout.logFileName(sequence: 2)
        for (temporary, bytes) in [
            (".syncthing.\(name).tmp", two.prefix(two.count / 2)),
            ("~syncthing~\(name).tmp", two),
            ("\(name).partial", two.prefix(10)),
            (".~\(name)", Data("garbage".utf8)),
        ] {
            try bench.place(Data(bytes), name: temporary, author: "alpha", in: "beta", atomically: false)
        }

        let first = try bench.importOn("beta")
        #expect(first.logs == 1)
        #expect(first.waiting == 0)
        // Long past any settle interval, the temporaries are still nobody's business.
        let later = try bench.importOn("beta", after: 600_000)
        #expect(later.logs == 0 && later.waiting == 0)
        #expect(bench["beta"].log.corrupt.isEmpty)
        #expect(bench["beta"].log.waiting.isEmpty)
        #expect(try bench.titles("beta") == ["one"])

        try bench.deliver("alpha", [2], to: "beta")
        #expect(try bench.importOn("beta").logs == 1)
        #expect(try bench.contents("beta") == bench.contents("alpha"))
        #expect(bench["beta"].log.corrupt.isEmpty)
    }

    @Test("A log written non-atomically waits while partial, then is applied when complete")
    func partialLogWaitsThenApplies() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        let note = try bench.addNote("alpha", "first")
        try bench.update("alpha", note, ["rank": .integer(7)])
        try bench.deliver("alpha", [1], to: "beta")
        let bytes = try bench.logBytes("alpha", 2)
        let name = ContainerLayout.logFileName(sequence: 2)
        try bench.place(bytes.prefix(bytes.count / 3), name: name, author: "alpha", in: "beta", atomically: false)

        let first = try bench.importOn("beta")
        #expect(first.logs == 1)
        #expect(first.waiting == 1)
        // More arrives; still short.
        try bench.place(bytes.prefix(bytes.count * 2 / 3), name: name, author: "alpha", in: "beta", atomically: false)
        let second = try bench.importOn("beta")
        #expect(second.logs == 0 && second.waiting == 1)
        #expect(bench["beta"].log.waiting == [1, 1])
        #expect(try bench["beta"].store.fetch(FetchRequest(entity: "Note")).first?["rank"] == .integer(0))

        try bench.place(bytes, name: name, author: "alpha", in: "beta", atomically: false)
        let third = try bench.importOn("beta")
        #expect(third.logs == 1 && third.waiting == 0)
        #expect(try bench.contents("beta") == bench.contents("alpha"))
        #expect(try bench["beta"].store.fetch(FetchRequest(entity: "Note")).first?["rank"] == .integer(7))
        #expect(bench["beta"].log.corrupt.isEmpty, "a file still arriving is not corrupt")
    }

    @Test("A log delivered twice, or again after a restart, changes nothing and is not applied again")
    func duplicatesChangeNothing() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        let note = try bench.addNote("alpha", "a")
        try bench.addNote("alpha", "b")
        try bench.update("alpha", note, ["rank": .integer(3)])
        // 1 and 3 arrive, 2 is late: 3 waits for it (causal delivery).
        try bench.deliver("alpha", [1, 3], to: "beta")
        #expect(try bench.importOn("beta").logs == 1)
        // Beta edits the note after alpha did; the later write must stay.
        try bench.update("beta", note, ["title": .string("beta's title")])
        let before = try bench.contents("beta")

        try bench.deliver("alpha", [1, 3], to: "beta")
        let again = try bench.importOn("beta")
        #expect(again.logs == 0 && again.changes == 0)
        #expect(try bench.contents("beta") == before)

        // After a restart the applied logs are known from the store alone.
        try bench.restart("beta")
        try bench.deliver("alpha", [1, 3], to: "beta")
        let afterRestart = try bench.importOn("beta")
        #expect(afterRestart.logs == 0 && afterRestart.changes == 0)
        #expect(try bench.contents("beta") == before)

        try bench.deliver("alpha", [2], to: "beta")
        #expect(try bench.importOn("beta").logs == 2, "2 arrived: 2 and the waiting 3 apply")
        try bench.deliver("alpha", [2], to: "beta")
        #expect(try bench.importOn("beta").logs == 0)
        try bench.deliverEverything()
        try bench.importOn("alpha")
        #expect(try bench.contents("beta") == bench.contents("alpha"))
        #expect(try bench.titles("alpha") == ["b", "beta's title"])
    }

    @Test("A Syncthing conflict copy of an immutable log is recognised and not applied twice")
    func conflictCopiesAreNotAppliedTwice() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        for title in ["one", "two", "three", "four"] { try bench.addNote("alpha", title) }
        let copyName = { (sequence: UInt64) in
            String(ContainerLayout.logFileName(sequence: sequence).dropLast(".cclog".count))
                + ".sync-conflict-20261122-101010-ABCDEFG.cclog"
        }
        #expect(copyName(3) == "0000000000000003.sync-conflict-20261122-101010-ABCDEFG.cclog")
        try bench.deliver("alpha", [1, 2, 3], to: "beta")
        try bench.place(bench.logBytes("alpha", 3), name: copyName(3), author: "alpha", in: "beta")

        let first = try bench.importOn("beta")
        #expect(first.logs == 3 && first.changes == 3)
        #expect(try bench.titles("beta") == ["one", "three", "two"])

        // Only the copy of 4 arrives: it stands in for the original, which later changes nothing.
        try bench.place(bench.logBytes("alpha", 4), name: copyName(4), author: "alpha", in: "beta")
        #expect(try bench.importOn("beta").logs == 1)
        try bench.deliver("alpha", [4], to: "beta")
        #expect(try bench.importOn("beta").logs == 0)

        // A conflict copy of beta's own log in beta's own folder is beta's history, not news.
        try bench.addNote("beta", "five")
        let own = ContainerLayout(container: bench["beta"].view, storeName: SyncTestBench.storeName).deviceFolder(
            "beta"
        )
        try bench.logBytes("beta", 1).write(to: own.appendingPathComponent(copyName(1)))
        #expect(try bench.importOn("beta", after: 600_000).logs == 0)

        #expect(bench["beta"].log.corrupt.isEmpty)
        try bench.deliverEverything()
        try bench.importOn("alpha")
        #expect(try bench.contents("beta") == bench.contents("alpha"))
    }

    @Test("A checksummed log whose changes do not fit the schema is reported once and skipped; it blocks nothing")
    func illFittingLogsAreSkipped() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        try bench.addNote("alpha", "one")  // 1
        let wrongType = try bench.addNote("alpha", "two")  // 2: rank becomes a string
        let wrongTarget = try bench.addNote("alpha", "three")  // 3: folder points at a tag
        try bench.addNote("alpha", "four")  // 4
        try bench.addNote("alpha", "five")  // 5
        try bench.deliver("alpha", [1, 4], to: "beta")

        /// Alpha's log `sequence`, its changes rewritten by `rewrite` and sealed again as its writer would.
        func rewritten(_ sequence: UInt64, _ rewrite: (inout SyncChange) -> Void) throws -> Data {
            let log = try LogFile.decode(
                bench.logBytes("alpha", sequence),
                url: bench.logURL("alpha", sequence, in: "alpha")
            )
            var payload = try SyncPayload.decode(from: log)
            rewrite(&payload.changes[0])
            return LogFile(
                device: log.device,
                sequence: log.sequence,
                schemaVersion: log.schemaVersion,
                created: log.created,
                payload: try payload.encoded()
            ).encoded()
        }
        try bench.place(
            rewritten(2) { $0.values["rank"]?.value = .string("high") },
            name: ContainerLayout.logFileName(sequence: 2),
            author: "alpha",
            in: "beta"
        )
        try bench.place(
            rewritten(3) { $0.references["folder"]?.target = ObjectID.random(entity: "Tag") },
            name: ContainerLayout.logFileName(sequence: 3),
            author: "alpha",
            in: "beta"
        )

        // Before the fix this import failed as a whole, and so did every later one: one bad log
        // stopped sync for good.
        let report = try bench.importOn("beta")
        #expect(report.logs == 2)  // 1 and 4; 2 and 3 are skipped
        #expect(try bench.titles("beta") == ["four", "one"])
        let reported = bench["beta"].log.corrupt
        #expect(reported.map(\.code) == [.corruptLog, .corruptLog])
        #expect(
            reported.compactMap { $0.url?.lastPathComponent }
                == [2, 3].map { ContainerLayout.logFileName(sequence: $0) }
        )
        #expect(reported.first?.message.contains("\(wrongType).rank") == true, "\(reported)")
        #expect(reported.last?.message.contains("\(wrongTarget).folder") == true, "\(reported)")

        try bench.deliver("alpha", [5], to: "beta")
        #expect(try bench.importOn("beta").logs == 1)
        #expect(try bench.importOn("beta", after: 600_000).logs == 0)
        #expect(bench["beta"].log.corrupt.count == 2, "each is reported once")
        #expect(try bench.titles("beta") == ["five", "four", "one"])
        // Beta's own saves still validate and go out.
        try bench.addNote("beta", "beta's")
        try bench.deliverEverything()
        #expect(try bench.importOn("alpha").logs == 1)
    }

    @Test("A checksummed log stamped at the end of time is refused, the same on every device; later edits still win")
    func logsStampedAtTheEndOfTimeAreRefused() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        let note = try bench.addNote("alpha", "one")  // 1
        try bench.edit("alpha") { context in  // 2
            var record = try #require(try context.record(with: note))
            record["title"] = .string("two")
            try context.update(record)
        }
        try bench.deliver("alpha", [1], to: "beta")
        try bench.importOn("beta")
        // Log 2 as a hostile or broken writer sealed it: every timestamp at the end of the range.
        let log = try LogFile.decode(bench.logBytes("alpha", 2), url: bench.logURL("alpha", 2, in: "alpha"))
        var payload = try SyncPayload.decode(from: log)
        let end = SyncClock(time: .max, counter: .max, device: "alpha")
        for index in payload.changes.indices {
            for key in payload.changes[index].values.keys { payload.changes[index].values[key]?.clock = end }
        }
        let sealed = LogFile(
            device: log.device,
            sequence: log.sequence,
            schemaVersion: log.schemaVersion,
            created: log.created,
            payload: try payload.encoded()
        )
        try bench.place(sealed.encoded(), name: ContainerLayout.logFileName(sequence: 2), author: "alpha", in: "beta")
        let report = try bench.importOn("beta")
        #expect(report.logs == 0 && report.blocked == 0, "\(report)")
        let reported = bench["beta"].log.corrupt
        #expect(reported.map(\.code) == [.corruptLog])
        #expect(reported.first?.url?.lastPathComponent == ContainerLayout.logFileName(sequence: 2))
        #expect(reported.first?.message.contains("after the year 9999") == true, "\(reported)")
        // Beta's edit wins on both devices, as a later edit should.
        try bench.edit("beta") { context in
            var record = try #require(try context.record(with: note))
            record["title"] = .string("beta's")
            try context.update(record)
        }
        try bench.deliver("beta", [1], to: "alpha")
        try bench.importOn("alpha")
        #expect(try bench.titles("alpha") == ["beta's"])
        #expect(try bench.titles("beta") == ["beta's"])
    }

    @Test("A crash between a commit and its export: the log is written by the next exportPending()")
    func crashBetweenCommitAndExport() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        try bench.addNote("alpha", "exported")
        try bench.edit("alpha", export: false) { context in
            _ = try context.insert(entity: "Note", values: ["title": .string("committed, not exported")])
        }
        #expect(!FileManager.default.fileExists(atPath: bench.logURL("alpha", 2, in: "alpha").path))

        try bench.restart("alpha")
        #expect(bench["alpha"].sync.deviceID == "alpha")
        #expect(try bench["alpha"].sync.exportPending() == 1)
        #expect(FileManager.default.fileExists(atPath: bench.logURL("alpha", 2, in: "alpha").path))
        #expect(try bench["alpha"].sync.exportPending() == 0)
        // The sequence continues where the store left it.
        try bench.addNote("alpha", "after the crash")
        #expect(try bench["alpha"].sync.layout.logSequences(device: "alpha") == [1, 2, 3])

        try bench.deliverEverything()
        #expect(try bench.importOn("beta").logs == 3)
        #expect(try bench.contents("beta") == bench.contents("alpha"))
    }

    @Test("A commit that fails in the middle of an import: the next import resumes and converges")
    func crashMidImportResumes() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        let beta = try bench.addDevice("beta", flaky: true)
        let first = try bench.addNote("alpha", "one")
        try bench.addNote("alpha", "two")
        try bench.update("alpha", first, ["rank": .integer(5)])
        try bench.addNote("alpha", "four")
        try bench.addNote("beta", "beta's")
        try bench.deliverEverything()

        // One log per batch; the commit that brings "two", then the one that brings the rank, fails
        // once.
        FlakyFormat.failCommit(key: beta.flakyKey) { records in records.contains { $0["title"] == .string("two") } }
        FlakyFormat.failCommit(key: beta.flakyKey) { records in records.contains { $0["rank"] == .integer(5) } }
        #expect(throws: (any Error).self) { try bench.importOn("beta", batchSize: 1) }
        #expect(try bench.titles("beta") == ["beta's", "one"])
        // In this process, the next import picks up where the failed one stopped, and fails too...
        #expect(throws: (any Error).self) { try bench.importOn("beta", batchSize: 1) }
        #expect(try bench.titles("beta") == ["beta's", "one", "two"])
        // ...and this time the process dies and starts again.
        try bench.restart("beta")
        let resumed = try bench.importOn("beta", batchSize: 1)
        #expect(resumed.logs == 2)
        try bench.importOn("alpha")
        #expect(try bench.contents("beta") == bench.contents("alpha"))
        #expect(try bench["beta"].store.records(with: [first]).first?["rank"] == .integer(5))
    }
}

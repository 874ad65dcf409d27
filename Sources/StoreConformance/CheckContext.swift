import Foundation
import Persistence
import Synchronization

/// What one running check works with: its directory, the plugin, and helpers that turn a
/// store's errors and differences into ``ConformanceFailure``s.
final class CheckContext {
    let check: String
    let storeType: any PersistentStore.Type
    let options: StoreOptions
    let directory: URL
    let eventTimeout: TimeInterval
    /// Whether record comparisons tell `-0.0` from `0.0` (the round-trip checks do; the others
    /// turn it off so a lost sign does not hide what they check).
    var distinguishesZeroSign = true

    init(
        check: String,
        storeType: any PersistentStore.Type,
        options: StoreOptions,
        directory: URL,
        eventTimeout: TimeInterval
    ) {
        self.check = check
        self.storeType = storeType
        self.options = options
        self.directory = directory
        self.eventTimeout = eventTimeout
    }

    var typeName: String { storeType.storeType }

    /// A store location in the check's directory.
    func url(_ name: String = "store") -> URL {
        directory.appendingPathComponent("\(name).\(StoreConformance.sanitized(typeName))")
    }

    func failure(_ message: String, expected: String? = nil, actual: String? = nil) -> ConformanceFailure {
        ConformanceFailure(check: check, storeType: typeName, message: message, expected: expected, actual: actual)
    }

    /// Runs `body`; an error that is not a conformance failure becomes one that says which step
    /// threw it.
    func step<T>(_ what: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let failure as ConformanceFailure {
            throw failure
        } catch {
            throw failure("\(what) threw an error", expected: "no error", actual: "\(error)")
        }
    }

    func expect(
        _ condition: Bool,
        _ message: @autoclosure () -> String,
        expected: @autoclosure () -> String? = nil,
        actual: @autoclosure () -> String? = nil
    ) throws {
        if !condition { throw failure(message(), expected: expected(), actual: actual()) }
    }

    func open(
        _ url: URL,
        schema: Schema = ConformanceSchema.v1,
        options: StoreOptions? = nil
    ) throws -> any PersistentStore {
        try step("opening \(url.lastPathComponent) with schema version \(schema.version)") {
            try storeType.init(url: url, schema: schema, options: options ?? self.options)
        }
    }

    func commit(_ store: any PersistentStore, _ changes: StoreChanges, _ what: String) throws {
        try step("committing \(what)") { try store.commit(changes) }
    }

    func fetch(_ store: any PersistentStore, _ request: FetchRequest) throws -> [Record] {
        try step("fetching \(request.entity)") { try store.fetch(request) }
    }

    /// Every record of every entity of the store's schema.
    func allRecords(_ store: any PersistentStore) throws -> [Record] {
        try store.schema.entities.flatMap { try fetch(store, FetchRequest(entity: $0.name)) }
    }

    /// Fails unless the store holds exactly `expected` (every entity).
    func expectContents(_ store: any PersistentStore, _ expected: [Record], _ when: String) throws {
        let actual = try allRecords(store)
        if let difference = RecordComparison.difference(
            expected: expected,
            actual: actual,
            zeroSign: distinguishesZeroSign
        ) {
            throw failure("the store's records differ from what was committed \(when):\n    \(difference)")
        }
    }

    func metadata(_ store: any PersistentStore) throws -> StoreMetadata {
        try step("reading metadata") { try store.metadata() }
    }

    /// Runs `body`, which must throw a ``PersistenceError`` with one of `codes`.
    @discardableResult
    func expectError(
        _ codes: Set<PersistenceError.Code>,
        _ what: String,
        _ body: () throws -> Void
    ) throws -> PersistenceError {
        let expected = codes.map(\.rawValue).sorted().joined(separator: " or ")
        do {
            try body()
        } catch let error as PersistenceError {
            guard codes.contains(error.code) else {
                throw failure("\(what) threw the wrong PersistenceError", expected: expected, actual: "\(error)")
            }
            return error
        } catch {
            throw failure(
                "\(what) threw an error that is not a PersistenceError",
                expected: expected,
                actual: "\(error)"
            )
        }
        throw failure("\(what) did not throw", expected: expected, actual: "no error")
    }

    /// Every regular file under the check's directory, with its bytes.
    func directoryContents() -> [String: Data] {
        var contents: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.isRegularFileKey])
        while let url = enumerator?.nextObject() as? URL {
            guard (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true else { continue }
            let relative = String(url.resolvingSymlinksInPath().path.dropFirst(directory.path.count))
            contents[relative] = (try? Data(contentsOf: url)) ?? Data()
        }
        return contents
    }

    /// Fails when the check's directory differs from `before`.
    func expectDirectoryUnchanged(_ before: [String: Data], _ when: String) throws {
        let after = directoryContents()
        var differences: [String] = []
        for name in Set(before.keys).union(after.keys).sorted() {
            switch (before[name], after[name]) {
            case (nil, let data?): differences.append("\(name) was created (\(data.count) bytes)")
            case (_?, nil): differences.append("\(name) was deleted")
            case (let old?, let new?) where old != new:
                differences.append("\(name) changed (\(old.count) -> \(new.count) bytes)")
            default: break
            }
        }
        if !differences.isEmpty {
            throw failure(
                "files on disk changed \(when): " + differences.joined(separator: "; "),
                expected: "no change"
            )
        }
    }

    /// Whether two file URLs name the same path.
    func samePath(_ a: URL?, _ b: URL) -> Bool {
        guard let a else { return false }
        return a.standardizedFileURL.resolvingSymlinksInPath().path
            == b.standardizedFileURL.resolvingSymlinksInPath().path
    }

    /// Fails unless opening the store at `url` with `schema` throws a ``PersistenceError`` with
    /// one of `codes` whose `url` is the file, and leaves every file in the directory as it was.
    @discardableResult
    func expectOpenFails(
        _ url: URL,
        schema: Schema,
        codes: Set<PersistenceError.Code>,
        _ what: String
    ) throws -> PersistenceError {
        let before = directoryContents()
        let error = try expectError(codes, "opening \(what)") {
            let store = try storeType.init(url: url, schema: schema, options: options)
            store.close()
        }
        try expect(
            samePath(error.url, url),
            "the error for \(what) does not name the file",
            expected: url.path,
            actual: error.url?.path ?? "no url (\(error))"
        )
        try expectDirectoryUnchanged(before, "after failing to open \(what)")
        return error
    }

    /// Collects a store's events so a check can wait for one, with a bound.
    func recordEvents(of store: any PersistentStore) -> EventLog {
        let log = EventLog()
        log.token = store.events.addListener { [log] event in log.append(event) }
        return log
    }
}

/// The events a store reported, in order, and a bounded wait for the next ones.
final class EventLog: Sendable {
    private let events = Mutex<[StoreEvent]>([])
    private let signal = DispatchSemaphore(value: 0)
    private let tokenStorage = Mutex<UInt64?>(nil)

    var token: UInt64? {
        get { tokenStorage.withLock { $0 } }
        set { tokenStorage.withLock { $0 = newValue } }
    }

    func append(_ event: StoreEvent) {
        events.withLock { $0.append(event) }
        signal.signal()
    }

    var all: [StoreEvent] { events.withLock { $0 } }

    /// Waits until an event satisfying `condition` has been reported, at most `timeout` seconds.
    func wait(timeout: TimeInterval, for condition: (StoreEvent) -> Bool) -> StoreEvent? {
        let deadline = DispatchTime.now() + timeout
        while true {
            if let event = all.first(where: condition) { return event }
            if signal.wait(timeout: deadline) == .timedOut { return all.first(where: condition) }
        }
    }
}

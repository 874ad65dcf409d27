// A store reopens after any crash: the states a killed process leaves an SQLite store in, built
// byte for byte as SQLite leaves them, open with every commit; really damaged files are refused
// and left as they were; a page damaged before an unclean close is found before anything writes.
import ConcordTestSupport
import Foundation
import Persistence
import StoreConformance
import Testing

@testable import SQLiteStore

@Suite("Store crash recovery")
struct CrashRecoveryTests {
    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    static let options = StoreOptions(presentsFiles: false)

    static func item(_ index: Int) -> Record {
        Record(
            id: .deterministic(entity: "Item", name: "item \(index)"),
            values: [
                "title": .string("item \(index)"), "number": .integer(Int64(index)),
                "blob": .data(Data(repeating: UInt8(index % 251), count: 1500)),
            ]
        )
    }

    /// Copies the store's database with its `-wal` and `-shm`, as they are on disk now (the
    /// state a process killed at this instant leaves), to `target`.
    static func crashCopy(of url: URL, to target: URL) throws {
        for (source, destination) in zip(SQLiteStore.files(at: url), SQLiteStore.files(at: target))
        where FileManager.default.fileExists(atPath: source.path) {
            try FileManager.default.copyItem(at: source, to: destination)
        }
    }

    /// A store with `count` records, left open (its log not checkpointed), and a crash copy of
    /// it cut in the middle of a checkpoint: the database header ahead of the file size, the rest
    /// of the pages in the `-wal`. Returns the copy and the records.
    static func interruptedCheckpoint(
        in directory: TemporaryDirectory,
        count: Int = 400
    ) throws -> (URL, [Record], WriteAheadLog) {
        let original = directory("original.sqlite")
        let store = try SQLiteStore(url: original, schema: ConformanceSchema.v1, options: options)
        defer { store.close() }
        let records = (0..<count).map(item)
        for start in stride(from: 0, to: count, by: 100) {
            try store.commit(StoreChanges(inserts: Array(records[start..<min(start + 100, count)])))
        }
        let copy = directory("crashed.sqlite")
        try crashCopy(of: original, to: copy)
        let log = try WriteAheadLog(Data(contentsOf: URL(fileURLWithPath: copy.path + "-wal")))
        let before = try DatabaseHeader(copy)
        try #require(
            log.pages[1] != nil && log.databasePages > 100,
            "the log holds \(log.pages.count) pages, database size \(log.databasePages); file: \(before)"
        )
        // Cut the checkpoint at the middle page of the log: page 1 (the header) and the pages
        // below the cut are in the file, the rest only in the log.
        let sorted = log.pages.keys.sorted()
        try log.interruptCheckpoint(of: copy, after: sorted[sorted.count / 2])
        return (copy, records, log)
    }

    static func companionBytes(_ url: URL) -> [String: Data] {
        var result: [String: Data] = [:]
        for file in SQLiteStore.files(at: url) {
            result[file.lastPathComponent] = FileManager.default.contents(atPath: file.path)
        }
        return result
    }

    @Test(
        "A database left by a process killed mid-checkpoint (header ahead of the file, the rest in -wal) opens with every commit"
    )
    func interruptedCheckpointOpens() throws {
        let directory = TemporaryDirectory("crash-checkpoint")
        let (copy, records, log) = try Self.interruptedCheckpoint(in: directory)
        let header = try DatabaseHeader(copy)
        // The state as found: the header counts the pages after the log's last commit, the file
        // holds fewer, the log holds the rest.
        #expect(header.pageCount == log.databasePages, "\(header); log: database size \(log.databasePages) pages")
        #expect(header.isAheadOfFile, "\(header)")
        let logSize =
            (try FileManager.default.attributesOfItem(atPath: copy.path + "-wal")[.size] as? NSNumber)?.intValue ?? 0
        #expect(logSize > header.fileSize / 2, "the -wal has \(logSize) bytes; \(header)")

        let store = try SQLiteStore(url: copy, schema: ConformanceSchema.v1, options: Self.options)
        #expect(store.checkedIntegrityAtOpen, "a store left with frames in its -wal is checked at open")
        let fetched = try store.fetch(FetchRequest(entity: "Item"))
        #expect(fetched.count == records.count, "fetched \(fetched.count) of \(records.count) records")
        #expect(Set(fetched) == Set(records), "the records read back differ from the ones committed")
        #expect(try store.pragma("integrity_check") == "ok")
        try store.commit(StoreChanges(inserts: [Self.item(10_000)]))
        store.close()

        // Closed cleanly, it reopens without the check, with everything.
        #expect(!FileManager.default.fileExists(atPath: copy.path + "-wal"), "a clean close leaves no -wal")
        let after = try DatabaseHeader(copy)
        #expect(!after.isAheadOfFile, "after a clean close: \(after)")
        let reopened = try SQLiteStore(url: copy, schema: ConformanceSchema.v1, options: Self.options)
        defer { reopened.close() }
        #expect(!reopened.checkedIntegrityAtOpen, "a clean reopen runs no integrity check")
        #expect(try reopened.count(for: FetchRequest(entity: "Item")) == records.count + 1)
    }

    @Test(
        "Really damaged: the same state without its -wal, or with the -wal's frames torn, is refused and left as it was"
    )
    func damagedInterruptedCheckpointRefused() throws {
        let directory = TemporaryDirectory("crash-damaged")
        let (copy, _, _) = try Self.interruptedCheckpoint(in: directory)
        let header = try DatabaseHeader(copy)
        try #require(header.isAheadOfFile, "\(header)")
        let wal = URL(fileURLWithPath: copy.path + "-wal")

        // The log's frames torn: every frame's salt overwritten, so SQLite finds none valid.
        let torn = directory("torn.sqlite")
        try Self.crashCopy(of: copy, to: torn)
        var logBytes = [UInt8](try Data(contentsOf: wal))
        let pageSize = header.pageSize
        var offset = 32
        while offset + 24 + pageSize <= logBytes.count {
            for index in (offset + 8)..<(offset + 16) { logBytes[index] ^= 0x5A }
            offset += 24 + pageSize
        }
        try Data(logBytes).write(to: URL(fileURLWithPath: torn.path + "-wal"))
        try expectRefused(torn, "a checkpoint cut short, with the -wal's frames torn")

        // The log lost.
        try FileManager.default.removeItem(at: wal)
        try expectRefused(copy, "a checkpoint cut short, with the -wal lost")
    }

    @Test("A page damaged before an unclean close is found at open, before anything writes the file")
    func damagedPageFoundAfterUncleanClose() throws {
        let directory = TemporaryDirectory("crash-page")
        let original = directory("original.sqlite")
        let store = try SQLiteStore(url: original, schema: ConformanceSchema.v1, options: Self.options)
        defer { store.close() }
        try store.commit(StoreChanges(inserts: (0..<400).map(Self.item)))
        try store.savePresentedItemChanges()  // checkpointed: the records are in the database file
        try store.commit(StoreChanges(metadataEntries: ["last": Data("one more commit".utf8)]))
        let copy = directory("crashed.sqlite")
        try Self.crashCopy(of: original, to: copy)
        let log = try WriteAheadLog(Data(contentsOf: URL(fileURLWithPath: copy.path + "-wal")))
        let header = try DatabaseHeader(copy)
        try #require(!log.pages.isEmpty, "the copy's -wal holds no frames")

        // Damage a b-tree leaf page (type 0x0A or 0x0D) that only the database file holds (the log would
        // supersede it): garbage over its whole content, header and cells.
        let bytes = try Data(contentsOf: copy)
        let filePages = header.fileSize / header.pageSize
        let victim = try #require(
            (2...filePages).reversed().first {
                log.pages[$0] == nil && [0x0A, 0x0D].contains(bytes[($0 - 1) * header.pageSize])
            },
            "no b-tree leaf page outside the log"
        )
        let handle = try FileHandle(forUpdating: copy)
        try handle.seek(toOffset: UInt64((victim - 1) * header.pageSize))
        try handle.write(contentsOf: Data((0..<header.pageSize).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }))
        try handle.close()

        // Opened without the check, the damage goes unnoticed (what happened before).
        let unchecked = directory("unchecked.sqlite")
        try Self.crashCopy(of: copy, to: unchecked)
        let blind = try SQLiteStore(
            url: unchecked,
            schema: ConformanceSchema.v1,
            options: StoreOptions(presentsFiles: false, settings: ["integrityCheck": "never"])
        )
        #expect(!blind.checkedIntegrityAtOpen)
        blind.close()

        // By default, the unclean close makes the open check, and it refuses.
        let error = try expectRefused(copy, "page \(victim) of \(filePages) damaged, after an unclean close")
        #expect(error?.message.contains("integrity_check") == true, "\(String(describing: error))")
        #expect(error?.message.contains("not closed cleanly") == true, "\(String(describing: error))")
    }

    @Test("A clean reopen reads the header only; an unclean one checks; the setting overrides both")
    func checkOnlyAfterUncleanClose() throws {
        let directory = TemporaryDirectory("crash-policy")
        let url = directory("store.sqlite")
        do {
            let store = try SQLiteStore(url: url, schema: ConformanceSchema.v1, options: Self.options)
            try store.commit(StoreChanges(inserts: (0..<10).map(Self.item)))
            store.close()
        }
        func checked(_ setting: String?) throws -> Bool {
            let settings = setting.map { ["integrityCheck": $0] } ?? [:]
            let store = try SQLiteStore(
                url: url,
                schema: ConformanceSchema.v1,
                options: StoreOptions(presentsFiles: false, settings: settings)
            )
            defer { store.close() }
            return store.checkedIntegrityAtOpen
        }
        #expect(try checked(nil) == false)
        #expect(try checked("never") == false)
        #expect(try checked("quick") == true)
        #expect(try checked("always") == true)
        // Another connection open (its -wal has frames): the open cannot tell it from a crash, and checks.
        let other = try SQLiteStore(url: url, schema: ConformanceSchema.v1, options: Self.options)
        try other.commit(StoreChanges(inserts: [Self.item(99)]))
        #expect(try checked(nil) == true)
        #expect(try checked("never") == false)
        other.close()
        #expect(throws: PersistenceError.self) {
            try SQLiteStore(
                url: url,
                schema: ConformanceSchema.v1,
                options: StoreOptions(presentsFiles: false, settings: ["integrityCheck": "sometimes"])
            )
        }
    }

    /// Opening `url` must throw ``PersistenceError/Code/corruptStore`` naming it, with the
    /// database, its `-wal` and its `-shm` left byte for byte as they were.
    @discardableResult
    func expectRefused(
        _ url: URL,
        _ what: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> PersistenceError? {
        let before = Self.companionBytes(url)
        var caught: PersistenceError?
        do {
            let store = try SQLiteStore(url: url, schema: ConformanceSchema.v1, options: Self.options)
            let count = try? store.count(for: FetchRequest(entity: "Item"))
            store.close()
            Issue.record(
                "opened \(what) (\(count.map(String.init) ?? "no") records readable)",
                sourceLocation: sourceLocation
            )
        } catch let error as PersistenceError {
            caught = error
            #expect(error.code == .corruptStore, "\(what): \(error)", sourceLocation: sourceLocation)
            #expect(
                error.url == url,
                "\(what): the error names \(String(describing: error.url))",
                sourceLocation: sourceLocation
            )
        }
        let after = Self.companionBytes(url)
        #expect(
            after == before,
            "\(what): files changed: before \(before.mapValues { $0.count }), after \(after.mapValues { $0.count })",
            sourceLocation: sourceLocation
        )
        return caught
    }
}

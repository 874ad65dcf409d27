import ConcordTestSupport
import Foundation
import Synchronization
import Testing

@testable import FolderSync

/// A clock the test moves by hand.
final class ManualClock: Sendable {
    private let current: Mutex<Date>

    init(_ start: Date = Date()) { current = Mutex(start) }

    var now: Date { current.withLock { $0 } }

    func advance(by seconds: TimeInterval) { current.withLock { $0 += seconds } }
}

@Suite("Log scanner: what file-sync engines leave in a container")
struct LogScannerTests {
    let directory = TemporaryDirectory()
    let layout: ContainerLayout
    let clock = ManualClock()

    init() {
        layout = ContainerLayout(container: directory.url, storeName: "Store")
    }

    func scanner(own: String = "me") -> LogScanner {
        let clock = clock
        return LogScanner(layout: layout, ownDevice: own, settleInterval: .seconds(2), now: { clock.now })
    }

    static func log(_ device: String, _ sequence: UInt64, _ text: String = "payload") -> LogFile {
        LogFile(
            device: device,
            sequence: sequence,
            schemaVersion: 1,
            created: Date(timeIntervalSince1970: 1_800_000_000),
            payload: Data("\(text) \(device) \(sequence)".utf8)
        )
    }

    /// Puts `data` at `url` the way a non-atomic sync engine would: in place, no rename.
    /// Writes `data` at `url`, modified at the test clock's now (as a writer would at that time).
    func put(_ data: Data, at url: URL) throws {
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try data.write(to: url)
        try FileManager.default.setAttributes([.modificationDate: clock.now], ofItemAtPath: url.path)
    }

    func copyURL(_ device: String, _ name: String) -> URL {
        layout.deviceFolder(device).appendingPathComponent(name)
    }

    /// Every path under the container with its content, to prove the scanner changes nothing.
    func snapshot() throws -> [String: Data] {
        var result: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(atPath: directory.url.path)!
        while let path = enumerator.nextObject() as? String {
            let url = directory.url.appendingPathComponent(path)
            result[path] = (try? Data(contentsOf: url)) ?? Data("<folder>".utf8)
        }
        return result
    }

    // MARK: - Ready logs

    @Test func readyLogsOfOtherDevicesInSequenceOrder() throws {
        for (device, sequence) in [("B", 2), ("A", 3), ("B", 1), ("A", 1), ("A", 2), ("me", 1)] {
            try LogWriter.write(Self.log(device, UInt64(sequence)), layout: layout)
        }
        let before = try snapshot()
        let report = try scanner().scan()
        #expect(report.ready.map { "\($0.log.device)/\($0.log.sequence)" } == ["A/1", "A/2", "A/3", "B/1", "B/2"])
        #expect(report.ready.allSatisfy { $0.url == layout.logURL(device: $0.log.device, sequence: $0.log.sequence) })
        #expect(report.ready.first?.log == Self.log("A", 1))
        #expect(report.waiting.isEmpty && report.corrupt.isEmpty && report.conflictCopies.isEmpty)
        #expect(try snapshot() == before)
    }

    @Test func anEmptyStoreAndAMissingDevicesFolderAreEmpty() throws {
        try FileManager.default.createDirectory(at: layout.storeFolder, withIntermediateDirectories: true)
        let report = try scanner().scan()
        #expect(report.ready.isEmpty && report.waiting.isEmpty && report.unrecognized.isEmpty)
    }

    @Test func appliedLogsAreNeitherReadNorReported() throws {
        for sequence in 1...4 { try LogWriter.write(Self.log("A", UInt64(sequence)), layout: layout) }
        try LogWriter.write(Self.log("B", 1), layout: layout)
        // Damage an applied log: a scan past it does not even read it.
        try put(Data("overwritten".utf8), at: layout.logURL(device: "A", sequence: 1))
        let copy = copyURL("A", "0000000000000002.sync-conflict-20261122-101010-ABCDEFG.cclog")
        try FileManager.default.copyItem(at: layout.logURL(device: "A", sequence: 2), to: copy)
        let scanner = scanner()
        let report = try scanner.scan(after: ["A": 2])
        #expect(report.ready.map { "\($0.log.device)/\($0.log.sequence)" } == ["A/3", "A/4", "B/1"])
        #expect(report.conflictCopies == [copy])
        #expect(report.waiting.isEmpty && report.corrupt.isEmpty)
        #expect(try scanner.scan(after: ["A": 4, "B": 1]).ready.isEmpty)
    }

    @Test func aConflictCopyStandingInForAnAppliedLogIsNotReadyAgain() throws {
        let copy = copyURL("A", "0000000000000001 (conflicted copy 2026-11-22).cclog")
        try put(Self.log("A", 1).encoded(), at: copy)
        let scanner = scanner()
        #expect(try scanner.scan().ready.map(\.url) == [copy])
        #expect(try scanner.scan(after: ["A": 1]).ready.isEmpty)
    }

    // MARK: - Partial files

    @Test func aPartialFileWaitsThenIsCorruptOnceThenReadyWhenComplete() throws {
        try LogWriter.write(Self.log("A", 1), layout: layout)
        let scanner = scanner()
        let url = layout.logURL(device: "B", sequence: 1)
        let full = Self.log("B", 1).encoded()
        try put(full.prefix(full.count / 2), at: url)

        var report = try scanner.scan()
        #expect(report.waiting == [url])
        #expect(report.corrupt.isEmpty)
        #expect(report.ready.map(\.log) == [Self.log("A", 1)])
        // Unchanged, but modified less than the settle interval ago: still waiting.
        clock.advance(by: 1)
        report = try scanner.scan()
        #expect(report.waiting == [url] && report.corrupt.isEmpty)
        // Settled: corrupt, reported once.
        clock.advance(by: 2)
        report = try scanner.scan()
        #expect(report.waiting.isEmpty)
        #expect(report.corrupt.map(\.code) == [.truncatedLog])
        #expect(report.corrupt.first?.url == url)
        for _ in 0..<3 {
            clock.advance(by: 10)
            report = try scanner.scan()
            #expect(report.corrupt.isEmpty && report.waiting.isEmpty)
            #expect(report.ready.count == 1)
        }
        // The engine finishes the file: ready.
        try put(full, at: url)
        report = try scanner.scan()
        #expect(report.ready.map(\.log) == [Self.log("A", 1), Self.log("B", 1)])
        #expect(report.waiting.isEmpty && report.corrupt.isEmpty)
    }

    @Test func aReportedFileThatChangesIsExaminedAgain() throws {
        let scanner = scanner()
        let url = layout.logURL(device: "B", sequence: 1)
        try put(Data("garbage".utf8), at: url)
        _ = try scanner.scan()
        clock.advance(by: 5)
        #expect(try scanner.scan().corrupt.map(\.code) == [.corruptLog])
        clock.advance(by: 5)
        #expect(try scanner.scan().corrupt.isEmpty)
        // Different garbage: waits while it may be changing, then is reported once more.
        try put(Data("other garbage, longer".utf8), at: url)
        #expect(try scanner.scan().waiting == [url])
        clock.advance(by: 5)
        #expect(try scanner.scan().corrupt.map(\.code) == [.corruptLog])
        #expect(try scanner.scan().corrupt.isEmpty)
    }

    @Test func aGrowingFileKeepsWaiting() throws {
        let scanner = scanner()
        let url = layout.logURL(device: "B", sequence: 1)
        let full = Self.log("B", 1, String(repeating: "x", count: 1000)).encoded()
        for length in stride(from: 100, to: full.count, by: 200) {
            clock.advance(by: 10)  // long gaps, but the file changes between scans
            try put(full.prefix(length), at: url)
            let report = try scanner.scan()
            #expect(report.waiting == [url] && report.corrupt.isEmpty)
        }
    }

    @Test func aFileWithAnOldModificationTimeIsCorruptOnTheFirstScan() throws {
        let scanner = scanner()
        let url = layout.logURL(device: "B", sequence: 1)
        try put(Data("CONCORD-LOG\n".utf8), at: url)
        try FileManager.default.setAttributes(
            [.modificationDate: clock.now.addingTimeInterval(-3600)],
            ofItemAtPath: url.path
        )
        // An hour old is not arriving any more: a one-shot process, which scans once, reports it.
        #expect(try scanner.scan().corrupt.map(\.code) == [.truncatedLog])
        #expect(try scanner.scan().corrupt.isEmpty)
    }

    @Test func aFreshlyWrittenDamagedFileWaitsUntilItSettles() throws {
        let scanner = scanner()
        let url = layout.logURL(device: "B", sequence: 1)
        try put(Data("CONCORD-LOG\n".utf8), at: url)
        #expect(try scanner.scan().waiting == [url])
        clock.advance(by: 1)
        #expect(try scanner.scan().waiting == [url])
        clock.advance(by: 1.5)
        #expect(try scanner.scan().corrupt.map(\.code) == [.truncatedLog])
    }

    @Test func aModificationTimeInTheFutureStillSettles() throws {
        let scanner = scanner()
        let url = layout.logURL(device: "B", sequence: 1)
        try put(Data("CONCORD-LOG\n".utf8), at: url)
        try FileManager.default.setAttributes(
            [.modificationDate: Date(timeIntervalSinceNow: 86_400)],
            ofItemAtPath: url.path
        )
        #expect(try scanner.scan().waiting == [url])
        clock.advance(by: 1)
        #expect(try scanner.scan().waiting == [url])
        clock.advance(by: 1)
        #expect(try scanner.scan().corrupt.map(\.code) == [.truncatedLog])
    }

    // MARK: - Sync-engine files

    @Test func syncEngineTemporariesAreIgnored() throws {
        try LogWriter.write(Self.log("A", 1), layout: layout)
        let partial = Self.log("A", 2).encoded().prefix(20)
        for name in [
            ".syncthing.0000000000000002.cclog.tmp", "~syncthing~0000000000000002.cclog.tmp",
            "0000000000000002.cclog.partial", ".~0000000000000002.cclog", ".0000000000000002.cclog.77.concord-tmp",
        ] {
            try put(partial, at: copyURL("A", name))
        }
        let scanner = scanner()
        for _ in 0..<2 {
            let report = try scanner.scan()
            #expect(report.temporaries == 5)
            #expect(report.ready.map(\.log) == [Self.log("A", 1)])
            #expect(report.waiting.isEmpty && report.corrupt.isEmpty && report.unrecognized.isEmpty)
            clock.advance(by: 10)
        }
    }

    @Test func anIdenticalConflictCopyIsHarmlessAndNotCountedTwice() throws {
        let url = try LogWriter.write(Self.log("A", 7), layout: layout)
        let copy = copyURL("A", "0000000000000007.sync-conflict-20261122-101010-ABCDEFG.cclog")
        try FileManager.default.copyItem(at: url, to: copy)
        let dropbox = copyURL("A", "0000000000000007 (Someone's conflicted copy 2026-11-22).cclog")
        try FileManager.default.copyItem(at: url, to: dropbox)
        let report = try scanner().scan()
        #expect(report.ready == [ScannedLog(url: url, log: Self.log("A", 7))])
        #expect(Set(report.conflictCopies) == [copy, dropbox])
        #expect(report.corrupt.isEmpty && report.waiting.isEmpty)
    }

    @Test func aConflictCopyStandsInForAMissingOriginal() throws {
        let copy = copyURL("A", "0000000000000003.sync-conflict-20261122-101010-ABCDEFG.cclog")
        try put(Self.log("A", 3).encoded(), at: copy)
        var report = try scanner().scan()
        #expect(report.ready == [ScannedLog(url: copy, log: Self.log("A", 3))])
        // The original arrives: it is the one, and the copy is harmless.
        let url = try LogWriter.write(Self.log("A", 3), layout: layout)
        report = try scanner().scan()
        #expect(report.ready == [ScannedLog(url: url, log: Self.log("A", 3))])
        #expect(report.conflictCopies == [copy])
    }

    @Test func aDifferentConflictCopyIsReportedOnceAndTheOriginalWins() throws {
        let url = try LogWriter.write(Self.log("A", 2), layout: layout)
        let copy = copyURL("A", "0000000000000002.sync-conflict-20261122-101010-ABCDEFG.cclog")
        try put(Self.log("A", 2, "diverged").encoded(), at: copy)
        let garbled = copyURL("A", "0000000000000002 (conflicted copy 2026-11-22).cclog")
        try put(Data("not a log at all".utf8), at: garbled)
        let scanner = scanner()
        var report = try scanner.scan()
        #expect(report.ready == [ScannedLog(url: url, log: Self.log("A", 2))])
        #expect(report.corrupt.map(\.code) == [.conflictingLog])
        #expect(report.corrupt.first?.url == copy)
        #expect(report.waiting == [garbled])
        clock.advance(by: 5)
        report = try scanner.scan()
        #expect(report.corrupt.map(\.url) == [garbled])
        #expect(report.ready.count == 1 && report.conflictCopies.isEmpty)
        #expect(try scanner.scan().corrupt.isEmpty)
    }

    @Test func ownFolderIsReadForConflictCopiesOnly() throws {
        let url = try LogWriter.write(Self.log("me", 1), layout: layout)
        let copy = copyURL("me", "0000000000000001.sync-conflict-20261122-101010-ABCDEFG.cclog")
        try FileManager.default.copyItem(at: url, to: copy)
        let stranger = copyURL("me", "0000000000000002.sync-conflict-20261122-101010-ABCDEFG.cclog")
        try LogWriter.write(Self.log("me", 2), layout: layout)
        try put(Self.log("me", 2, "someone else").encoded(), at: stranger)
        let report = try scanner(own: "me").scan()
        #expect(report.ready.isEmpty)
        #expect(report.conflictCopies == [copy])
        #expect(report.corrupt.map(\.code) == [.conflictingLog])
    }

    // MARK: - Mismatches, versions, odd entries

    @Test func aLogInTheWrongPlaceIsCorruptAtOnce() throws {
        let scanner = scanner()
        let misplaced = layout.logURL(device: "B", sequence: 1)
        try put(Self.log("A", 1).encoded(), at: misplaced)
        let renumbered = layout.logURL(device: "B", sequence: 5)
        try put(Self.log("B", 4).encoded(), at: renumbered)
        let report = try scanner.scan()
        #expect(report.ready.isEmpty)
        #expect(Set(report.corrupt.compactMap(\.url)) == [misplaced, renumbered])
        #expect(report.corrupt.allSatisfy { $0.code == .corruptLog })
        #expect(try scanner.scan().corrupt.isEmpty)
    }

    @Test func aNewerFormatIsUnsupportedOnce() throws {
        var bytes = [UInt8](Self.log("B", 1).encoded())
        bytes[13] = 9
        let url = layout.logURL(device: "B", sequence: 1)
        try put(LogFileTests.resealed(bytes), at: url)
        let scanner = scanner()
        let report = try scanner.scan()
        #expect(report.unsupported.map(\.code) == [.unsupportedLogVersion])
        #expect(report.corrupt.isEmpty && report.waiting.isEmpty && report.ready.isEmpty)
        #expect(try scanner.scan().unsupported.isEmpty)
    }

    @Test func foldersThatAreNotDeviceIDsAreIgnored() throws {
        try LogWriter.write(Self.log("A", 1), layout: layout)
        for name in [".hidden", "bad name", String(repeating: "x", count: 65)] {
            try put(
                Self.log("A", 1).encoded(),
                at: layout.devicesFolder.appendingPathComponent(name).appendingPathComponent("0000000000000001.cclog")
            )
        }
        try put(Data("x".utf8), at: layout.devicesFolder.appendingPathComponent("stray-file"))
        try put(Data("x".utf8), at: copyURL("A", "README.txt"))
        try FileManager.default.createDirectory(
            at: copyURL("A", "0000000000000009.cclog"),
            withIntermediateDirectories: true
        )
        let report = try scanner().scan()
        #expect(report.ready.map(\.log) == [Self.log("A", 1)])
        #expect(report.unrecognized.count == 6)
        #expect(report.corrupt.isEmpty && report.waiting.isEmpty)
    }

    @Test func aMissingContainerOrStoreIsUnavailable() throws {
        let missing = LogScanner(
            layout: ContainerLayout(container: directory("nowhere"), storeName: "Store"),
            ownDevice: "me"
        )
        #expect { try missing.scan() } throws: { ($0 as? SyncError)?.code == .containerUnavailable }
        // The container is there, the store's folder is not.
        #expect { try scanner().scan() } throws: { ($0 as? SyncError)?.code == .containerUnavailable }
        // The container is a file, not a folder.
        try put(Data(), at: directory("file"))
        let notAFolder = LogScanner(
            layout: ContainerLayout(container: directory("file"), storeName: "Store"),
            ownDevice: "me"
        )
        #expect { try notAFolder.scan() } throws: { ($0 as? SyncError)?.code == .containerUnavailable }
    }

    @Test func aContainerThatVanishesBetweenScansIsUnavailable() throws {
        try LogWriter.write(Self.log("A", 1), layout: layout)
        let scanner = scanner()
        #expect(try scanner.scan().ready.count == 1)
        try FileManager.default.removeItem(at: layout.storeFolder)
        #expect { try scanner.scan() } throws: { ($0 as? SyncError)?.url == layout.storeFolder }
    }
}

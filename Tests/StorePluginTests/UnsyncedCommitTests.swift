// An SQLite commit whose sync of the -wal fails (EIO from fdatasync, injected with
// Tests/Crash/crashpoint.c) after its pages reached the -wal: SQLite reports it failed, yet the
// pages carry a valid commit mark, and a process killed before its next commit or close left a
// -wal that the next open recovered: the change "not saved" was there, and a retry made a
// duplicate. The store drops those pages at once, so "not saved" stays true.
import ConcordTestSupport
import Foundation
import Persistence
import SQLiteStore
import StoreConformance
import Testing

@Suite("A commit whose -wal sync fails")
struct UnsyncedCommitTests {
    let directory = TemporaryDirectory("unsynced-commit")

    /// Runs the helper's `store-insert sqlite SCHEMA url count` with `environment` added.
    func insert(
        _ url: URL,
        count: Int,
        environment: [String: String] = [:]
    ) throws -> (
        Subprocess.Termination?, [String], String
    ) {
        let schema = directory("schema.json")
        if !FileManager.default.fileExists(atPath: schema.path) {
            try JSONEncoder().encode(ConformanceSchema.v1).write(to: schema)
        }
        var merged = ProcessInfo.processInfo.environment
        merged.merge(environment) { $1 }
        let child = try Subprocess(
            ChildProcess.helperURL.path,
            ["store-insert", "sqlite", schema.path, url.path, "\(count)"],
            environment: merged,
            captureStandardError: true
        )
        var lines: [String] = []
        while let line = child.readLine(timeout: .seconds(60)) { lines.append(line) }
        return (child.wait(timeout: .seconds(60)), lines, child.readStandardError())
    }

    @Test(
        "the -wal's fdatasync fails after the commit's pages reached it: reported not saved, and still not there after the process is killed before it closes the store"
    )
    func killedAfterFailedSync() throws {
        let url = directory("items.sqlite")
        let (created, _, errors) = try insert(url, count: 2)
        try #require(created == .exited(0), "\(errors)")

        let (ended, lines, failure) = try insert(
            url,
            count: 3,
            environment: [
                "LD_PRELOAD": try FaultLibrary.build(in: directory),
                "CONCORD_CRASH_CALL": "fdatasync",
                "CONCORD_CRASH_SUFFIX": "items.sqlite-wal",
                // The -wal is new (the store closed cleanly): its header's sync comes first, then
                // the commit's, after its pages are written.
                "CONCORD_CRASH_SKIP": "1",
                "CONCORD_CRASH_WHEN": "after",
                "CONCORD_CRASH_FAIL": "5",
                "CONCORD_HELPER_DIE_ON_FAILURE": "1",
            ]
        )
        #expect(ended == .signaled(SIGKILL), "the helper killed itself after the failed commit: \(lines) \(failure)")
        let said = lines.joined(separator: "\n")
        #expect(said.contains("failed: ioFailed") && said.contains("the change is not saved"), "\(said) \(failure)")
        #expect(said.contains(url.path), "names the store: \(said)")

        // The next open recovers whatever the -wal holds: only the first commit.
        let store = try SQLiteStore(
            url: url,
            schema: ConformanceSchema.v1,
            options: StoreOptions(presentsFiles: false)
        )
        defer { store.close() }
        #expect(try store.count(for: FetchRequest(entity: "Item")) == 2, "the failed commit's records are not there")
    }
}

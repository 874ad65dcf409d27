// Which check the open runs: a clean open checked recently reads the header only; an open after
// a kill (or past the interval, or with `integrityCheck: full`) runs PRAGMA integrity_check. What
// each costs on a 100 MB store is measured by `make bench` (SQLiteOpenBenchmarks), not here.
import ConcordTestSupport
import Foundation
import Persistence
import StoreConformance
import Testing

@testable import SQLiteStore

@Suite("SQLite open: which check runs")
struct OpenCheckCostTests {
    static let options = StoreOptions(presentsFiles: false)

    /// Rows in the store (each with a 1.5 KB blob): enough for several pages of every table and index.
    static let rows = 300

    /// Opens the store at `url` with `settings`, closes it; whether the open ran a check.
    static func openChecked(_ url: URL, _ settings: [String: String] = [:]) throws -> Bool {
        let store = try SQLiteStore(
            url: url,
            schema: ConformanceSchema.v1,
            options: StoreOptions(presentsFiles: false, settings: settings)
        )
        defer { store.close() }
        return store.checkedIntegrityAtOpen
    }

    @Test(
        "a clean open checked recently runs no check; after a kill, past the interval, or with full, integrity_check runs"
    )
    func openChecks() throws {
        let directory = TemporaryDirectory("open-cost")
        let url = directory("big.sqlite")
        let store = try SQLiteStore(url: url, schema: ConformanceSchema.v1, options: Self.options)
        try store.commit(StoreChanges(inserts: (0..<Self.rows).map(CrashRecoveryTests.item)))
        store.close()

        for round in 0..<2 {
            #expect(try !Self.openChecked(url), "a clean open, checked at creation: no check")
            #expect(try Self.openChecked(url, ["integrityCheck": "quick"]))
            #expect(try Self.openChecked(url, ["integrityCheck": "full"]))
            // A process killed with the store open: its files as they are, a commit in the -wal.
            let live = try SQLiteStore(url: url, schema: ConformanceSchema.v1, options: Self.options)
            try live.commit(StoreChanges(inserts: [CrashRecoveryTests.item(Self.rows + round)]))
            let copy = directory("killed-\(round).sqlite")
            try CrashRecoveryTests.crashCopy(of: url, to: copy)
            live.close()
            #expect(try Self.openChecked(copy), "after a kill the open checks")
        }
        // Past the interval, a clean open checks, and records it: the next one does not.
        #expect(try Self.openChecked(url, ["integrityCheckInterval": "0"]))
        #expect(try !Self.openChecked(url))
    }
}

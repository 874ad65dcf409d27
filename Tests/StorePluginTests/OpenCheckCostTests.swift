// What the open's integrity check costs: a clean open checked recently reads the header only, as
// before; an open after a kill (or past the interval) runs PRAGMA integrity_check.
import ConcordTestSupport
import Foundation
import Persistence
import StoreConformance
import Testing

@testable import SQLiteStore

@Suite("SQLite open: which check runs, and what it costs")
struct OpenCheckCostTests {
    static let options = StoreOptions(presentsFiles: false)

    /// Rows in the measured store (about 4.4 KB of file each, their 1.5 KB blobs on pages of their
    /// own): `CONCORD_OPEN_COST_ROWS`, default 2,500 (about 11 MB); 23,000 makes a 100 MB store.
    static let rows = ProcessInfo.processInfo.environment["CONCORD_OPEN_COST_ROWS"].flatMap(Int.init) ?? 2_500

    static func open(_ url: URL, _ settings: [String: String] = [:]) throws -> (milliseconds: Double, checked: Bool) {
        let start = ContinuousClock.now
        let store = try SQLiteStore(
            url: url,
            schema: ConformanceSchema.v1,
            options: StoreOptions(presentsFiles: false, settings: settings)
        )
        let elapsed = ContinuousClock.now - start
        defer { store.close() }
        let milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        return (milliseconds, store.checkedIntegrityAtOpen)
    }

    @Test(
        "a clean open checked recently runs no check; after a kill, past the interval, or with full, integrity_check runs"
    )
    func openCost() throws {
        let directory = TemporaryDirectory("open-cost")
        let url = directory("big.sqlite")
        let store = try SQLiteStore(url: url, schema: ConformanceSchema.v1, options: Self.options)
        for start in stride(from: 0, to: Self.rows, by: 5000) {
            try store.commit(StoreChanges(inserts: (start..<min(start + 5000, Self.rows)).map(CrashRecoveryTests.item)))
        }
        store.close()
        let size = (try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.intValue ?? 0

        var clean: [Double] = []
        var quick: [Double] = []
        var full: [Double] = []
        var killed: [Double] = []
        for round in 0..<3 {
            let plain = try Self.open(url)
            #expect(!plain.checked, "a clean open, checked at creation: no check")
            clean.append(plain.milliseconds)
            quick.append(try Self.open(url, ["integrityCheck": "quick"]).milliseconds)
            let checked = try Self.open(url, ["integrityCheck": "full"])
            #expect(checked.checked)
            full.append(checked.milliseconds)
            // A process killed with the store open: its files as they are, a commit in the -wal.
            let live = try SQLiteStore(url: url, schema: ConformanceSchema.v1, options: Self.options)
            try live.commit(StoreChanges(inserts: [CrashRecoveryTests.item(Self.rows + round)]))
            let copy = directory("killed-\(round).sqlite")
            try CrashRecoveryTests.crashCopy(of: url, to: copy)
            live.close()
            let after = try Self.open(copy)
            #expect(after.checked, "after a kill the open checks")
            killed.append(after.milliseconds)
        }
        // Past the interval, a clean open checks, and records it: the next one does not.
        #expect(try Self.open(url, ["integrityCheckInterval": "0"]).checked)
        #expect(try !Self.open(url).checked)

        func median(_ values: [Double]) -> String { String(format: "%.1f", values.sorted()[values.count / 2]) }
        print(
            "SQLiteStore open, \(Self.rows) rows, \(size / 1_048_576) MiB (median of 3, ms): clean \(median(clean)), "
                + "quick_check \(median(quick)), integrity_check \(median(full)), after a kill (integrity_check) \(median(killed))"
        )
    }
}

import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

/// Import costs what is new: each log is read once when it applies, a pass that finds nothing new
/// reads no log, and applying many logs does not read the earlier ones again. (Times are measured
/// in `make bench`, not asserted here.)
@Suite("Import scaling")
struct ImportScalingTests {
    static let logs = 160

    @Test("each of many logs is read once as it arrives in batches; a pass with nothing new reads none")
    func eachLogIsReadOnce() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        for index in 0..<Self.logs { try bench.addNote("alpha", "note \(index)") }
        var read = 0
        var applied = 0
        for start in stride(from: 1, through: Self.logs, by: 40) {
            try bench.deliver("alpha", Array(UInt64(start)...UInt64(min(start + 39, Self.logs))), to: "beta")
            let report = try bench.importOn("beta")
            read += report.filesRead
            applied += report.logs
        }
        #expect(applied == Self.logs)
        #expect(read == Self.logs, "each log read once, not again at later passes: \(read) reads for \(Self.logs) logs")
        for _ in 0..<3 {
            let idle = try bench.importOn("beta")
            #expect(idle.filesRead == 0 && idle.logs == 0, "an idle pass read \(idle.filesRead) log(s)")
        }
        #expect(try bench.titles("beta").count == Self.logs)
    }

    @Test("logs that wait behind a missing one are read once, not again at every pass until it comes")
    func waitingLogsAreReadOnce() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        for index in 0..<40 { try bench.addNote("alpha", "note \(index)") }
        try bench.deliver("alpha", Array(2...40), to: "beta")
        let first = try bench.importOn("beta")
        #expect(first.logs == 0 && first.blocked == 1)
        #expect(first.filesRead == 39)
        for _ in 0..<3 {
            let again = try bench.importOn("beta")
            #expect(again.logs == 0 && again.filesRead == 0, "a pass with the gap still open read \(again.filesRead)")
        }
        try bench.deliver("alpha", [1], to: "beta")
        let filled = try bench.importOn("beta")
        #expect(filled.logs == 40 && filled.filesRead == 1)
        #expect(try bench.titles("beta").count == 40)
    }
}

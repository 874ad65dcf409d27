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
}

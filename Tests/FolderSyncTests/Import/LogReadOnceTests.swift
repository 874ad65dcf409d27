import FolderSync
import Foundation
import Persistence
import Testing

/// An arriving log is read once: the scan keeps what it read (up to a budget per scan), and the
/// importer applies it as read.
@Suite("Logs read once")
struct LogReadOnceTests {
    @Test("a pass that finds a few small logs reads each file once and applies it as read")
    func smallLogsAreReadOnce() throws {
        let bench = try LifecycleBench.syncingByHand("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        for title in ["one", "two", "three"] { _ = try alpha.addNote(title) }
        try alpha.sync.exportPending()
        let report = try beta.sync.importAvailable()
        #expect(report.logs == 3)
        #expect(report.filesRead == 3)
        #expect(report.logsReadAgain == 0)
        #expect(try beta.titles() == ["one", "three", "two"])
        // A pass that finds nothing new reads nothing.
        let idle = try beta.sync.importAvailable()
        #expect(idle.filesRead == 0 && idle.logsReadAgain == 0 && idle.logs == 0)
    }

    @Test(
        "a backlog larger than the scan's budget keeps what fits and reads the rest again as it applies it; everything arrives"
    )
    func largeBacklogIsReadAgainPastTheBudget() throws {
        let bench = try LifecycleBench.syncingByHand("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        // Ten logs of about a fifth of the budget each: about twice the budget in all.
        let size = LogScanner.payloadBudget / 5
        var titles: [String] = []
        for index in 0..<10 {
            let title = String(index) + String(repeating: "x", count: size)
            titles.append(title)
            _ = try alpha.addNote(title)
        }
        try alpha.sync.exportPending()
        let report = try beta.sync.importAvailable()
        #expect(report.logs == 10)
        #expect(report.filesRead == 10)
        #expect(report.logsReadAgain > 0, "nothing was read again: the whole backlog was kept")
        #expect(report.logsReadAgain < 10, "every log was read again: the scan kept none")
        #expect(try beta.titles() == titles.sorted())
    }
}

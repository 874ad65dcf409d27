import FolderSync
import Foundation
import Testing

extension LifecycleConvergenceTests {
    @Test(
        "a log committed and never written before the store was lost goes out empty when asked for, so that the device's later saves reach the others"
    )
    func logLostWithItsStoreGoesOutEmpty() throws {
        let bench = try LifecycleBench.syncingByHand("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        alpha.sync.missingLogGracePeriod = .zero
        try beta.addNote("first")
        #expect(try beta.sync.exportPending() == 1)
        try alpha.sync.importAvailable()
        // Log 2 is committed; the process dies before it writes it, and the machine is lost.
        try beta.addNote("never written")
        #expect(try beta.sync.publishAcknowledgement().committed == 2)
        let fresh = try bench.loseStore("beta")
        #expect(try fresh.sync.enable(live: false).state == .syncing)
        try fresh.addNote("after the loss")
        #expect(try fresh.sync.exportPending() == 1)
        let leapt = 2 + FolderSync.restoreLeap + 1
        #expect(try fresh.sync.layout.logSequences(device: "beta") == [1, leapt])
        // Alpha waits for log 2 and asks for it (the new log follows 2); beta cannot publish it,
        // and says so with an empty log, then sends what its store holds of its writes again in
        // a new log; then those apply.
        #expect(try alpha.sync.importAvailable().blocked == 1)
        try fresh.sync.importAvailable()
        #expect(try fresh.sync.layout.logSequences(device: "beta") == [1, 2, leapt, leapt + 1])
        #expect(try alpha.sync.importAvailable().logs == 3)
        #expect(try alpha.titles() == ["after the loss", "first"])
        #expect(try fresh.titles() == ["after the loss", "first"])
    }

    @Test(
        "several logs lost with the store go out empty together at the first request: the others do not ask for them one round trip at a time"
    )
    func logsLostWithTheStoreGoOutTogether() throws {
        let bench = try LifecycleBench.syncingByHand("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        alpha.sync.missingLogGracePeriod = .zero
        try beta.addNote("first")
        #expect(try beta.sync.exportPending() == 1)
        try alpha.sync.importAvailable()
        // Logs 2 to 4 are committed and never written; the machine is lost.
        for title in ["two", "three", "four"] { try beta.addNote(title) }
        #expect(try beta.sync.publishAcknowledgement().committed == 4)
        let fresh = try bench.loseStore("beta")
        #expect(try fresh.sync.enable(live: false).state == .syncing)
        try fresh.addNote("after the loss")
        #expect(try fresh.sync.exportPending() == 1)
        let leapt = 4 + FolderSync.restoreLeap + 1
        // Alpha asks for log 2; beta answers with 2, 3 and 4 at once, and one new log.
        #expect(try alpha.sync.importAvailable().blocked == 1)
        try fresh.sync.importAvailable()
        #expect(try fresh.sync.layout.logSequences(device: "beta") == [1, 2, 3, 4, leapt, leapt + 1])
        #expect(try alpha.sync.importAvailable().logs == 5)
        #expect(try alpha.titles() == ["after the loss", "first"])
    }
}

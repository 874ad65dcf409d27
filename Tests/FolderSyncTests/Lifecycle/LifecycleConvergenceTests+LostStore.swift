import FolderSync
import Foundation
import Testing

extension LifecycleConvergenceTests {
    @Test(
        "logs committed and never written before the store was lost go out empty when the first is asked for, all together (not one round trip each), so that the device's later saves reach the others",
        arguments: [1, 3] as [UInt64]
    )
    func logsLostWithTheStoreGoOutEmpty(lost: UInt64) throws {
        let bench = try LifecycleBench.syncingByHand("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        alpha.sync.missingLogGracePeriod = .zero
        try beta.addNote("first")
        #expect(try beta.sync.exportPending() == 1)
        try alpha.sync.importAvailable()
        // Logs 2 and on are committed; the process dies before it writes them, and the machine
        // is lost.
        for number in 1...lost { try beta.addNote("never written \(number)") }
        #expect(try beta.sync.publishAcknowledgement().committed == 1 + lost)
        let fresh = try bench.loseStore("beta")
        #expect(try fresh.sync.enable(live: false).state == .syncing)
        try fresh.addNote("after the loss")
        #expect(try fresh.sync.exportPending() == 1)
        let leapt = 1 + lost + FolderSync.restoreLeap + 1
        #expect(try fresh.sync.layout.logSequences(device: "beta") == [1, leapt])
        // Alpha waits for log 2 and asks for it (the new log follows the last lost one); beta
        // cannot publish them, and says so with empty logs, then sends what its store holds of
        // its writes again in a new log; then those apply.
        #expect(try alpha.sync.importAvailable().blocked == 1)
        try fresh.sync.importAvailable()
        #expect(try fresh.sync.layout.logSequences(device: "beta") == [1] + Array(2...(1 + lost)) + [leapt, leapt + 1])
        #expect(try alpha.sync.importAvailable().logs == Int(lost) + 2)
        #expect(try alpha.titles() == ["after the loss", "first"])
        #expect(try fresh.titles() == ["after the loss", "first"])
    }
}

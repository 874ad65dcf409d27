import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import Testing

@Suite("Pausing sync", .serialized)
struct SyncPauseTests {
    @Test("saves made while paused keep their history and are exported on resume; nothing is imported meanwhile")
    func pauseAndResume() throws {
        let bench = try LifecycleBench.syncing("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        try alpha.addNote("first")
        #expect(beta.waitForTitles(["first"]))

        beta.sync.pause()
        #expect(beta.sync.state == .paused)
        #expect(!beta.sync.isLive)
        #expect(try beta.sync.sentinel.isRegistered("beta"))
        let exportedBefore = try bench["beta"].sync.layout.logSequences(device: "beta")
        for index in 1...3 { try beta.addNote("paused \(index)") }
        try alpha.addNote("while beta pauses")
        alpha.sync.waitForQueuedWork()
        beta.sync.waitForQueuedWork()
        // Nothing left beta, nothing reached it; its saves are numbered and waiting.
        #expect(try beta.sync.layout.logSequences(device: "beta") == exportedBefore)
        #expect(try beta.sync.lastLocalSequence() == (exportedBefore.last ?? 0) + 3)
        #expect(try beta.titles() == ["first", "paused 1", "paused 2", "paused 3"])
        #expect(try alpha.titles() == ["first", "while beta pauses"])

        #expect(try beta.sync.resume().state == .syncing)
        #expect(beta.events.joins.last?.situation == .resuming)
        let all = ["first", "paused 1", "paused 2", "paused 3", "while beta pauses"]
        #expect(beta.waitForTitles(all))
        #expect(alpha.waitForTitles(all))
        #expect(try beta.sync.layout.logSequences(device: "beta").count == exportedBefore.count + 3)
    }

    @Test("pausing reports the state; a paused device is not reset by what happens meanwhile until it resumes")
    func pausedThenReset() throws {
        let bench = try LifecycleBench.syncing("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        beta.sync.pause()
        #expect(
            beta.events.events.contains { if case .stateChanged(.paused) = $0 { return true } else { return false } }
        )
        #expect(beta.events.wait { _ in beta.delegate.states.last == .paused })
        try alpha.sync.sentinel.unregister("beta")
        alpha.sync.waitForQueuedWork()
        #expect(beta.sync.state == .paused)
        #expect(beta.events.resets.isEmpty)
        // On resume, the missing registration makes it a returning device, whose choice runs.
        try beta.addNote("made while paused")
        #expect(try beta.sync.resume(policy: .always(.mergeLocalIntoContainer)).state == .syncing)
        #expect(beta.events.joins.last?.situation == .returningDevice(others: ["alpha"]))
        #expect(alpha.waitForTitles(["made while paused"]))
    }
}

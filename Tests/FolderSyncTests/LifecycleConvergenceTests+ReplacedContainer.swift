import FolderSync
import Foundation
import Testing

extension LifecycleConvergenceTests {
    @Test(
        "a restored device that had leapt (its first new log not written yet) and joins a container another device replaced numbers afresh there: its first log waits for nothing of the old container"
    )
    func leapDoesNotFollowIntoAReplacedContainer() throws {
        let bench = try LifecycleBench.syncing("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        for title in ["b1", "b2", "b3"] { _ = try beta.addNote(title) }
        beta.sync.waitForQueuedWork()
        #expect(alpha.waitForTitles(["b1", "b2", "b3"]))
        // beta's store is lost; restored, it leaps past its three logs (nothing to export yet).
        let fresh = try bench.loseStore("beta")
        #expect(try fresh.sync.enable().state == .syncing)
        #expect(try fresh.titles() == ["b1", "b2", "b3"])
        // alpha replaces the container while beta is off; beta merges into the new one.
        try fresh.sync.disable()
        try alpha.sync.disable()
        #expect(try alpha.sync.enable(policy: .always(.replaceContainerWithLocal)).state == .syncing)
        #expect(try fresh.sync.enable(policy: .always(.mergeLocalIntoContainer)).state == .syncing)
        _ = try fresh.addNote("beta in the new container")
        fresh.sync.waitForQueuedWork()
        let numbers = try fresh.sync.layout.logSequences(device: "beta")
        #expect(numbers.allSatisfy { $0 < FolderSync.restoreLeap }, "numbered afresh: \(numbers)")
        #expect(alpha.waitForTitles(["b1", "b2", "b3", "beta in the new container"]))
    }

    @Test(
        "a device that merges into a container another device replaced brings back nothing the replacing device had deleted: its deletions go into the new container with their clocks"
    )
    func mergeIntoReplacedContainerKeepsTheReplacersDeletions() throws {
        let (bench, kept, deleted) = try Self.apart()
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        // alpha (which deleted a note and ranked the other while beta was away) replaces the
        // container with its data; beta comes back merging into it.
        try alpha.sync.disable()
        #expect(try alpha.sync.enable(policy: .always(.replaceContainerWithLocal)).state == .syncing)
        #expect(try beta.sync.enable(policy: .always(.mergeLocalIntoContainer)).state == .syncing)
        for device in [alpha, beta] {
            #expect(device.waitForTitles(["kept, retitled by beta"]), "\(device.name): \((try? device.titles()) ?? [])")
            #expect(try device.store.records(with: [deleted]).isEmpty, "\(device.name) brought the deletion back")
            #expect(try device.store.records(with: [kept]).first?["rank"] == .integer(5), "\(device.name)")
        }
    }
}

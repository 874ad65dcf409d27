import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import Testing

@Suite("Container resets", .serialized)
struct ContainerResetTests {
    /// Two syncing devices with a note each, converged.
    static func syncingPair(_ strategy: SentinelTests.Strategy) throws -> LifecycleBench {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha", sentinel: strategy.factory)
        let beta = try bench.addDevice("beta", sentinel: strategy.factory)
        try alpha.addNote("from alpha")
        try beta.addNote("from beta")
        #expect(try alpha.sync.enable().state == .syncing)
        #expect(try beta.sync.enable().state == .syncing)
        #expect(alpha.waitForTitles(["from alpha", "from beta"]))
        #expect(beta.waitForTitles(["from alpha", "from beta"]))
        return bench
    }

    /// Checks that `device` was told of one reset, for `reason`, by event, delegate and
    /// notification, and that its store is intact and still takes saves.
    static func expectStoppedOnce(
        _ device: LifecycleBench.Device,
        _ notifications: ResetNotificationCounter,
        reasons: Set<ContainerResetReason>
    ) throws {
        // The delegate and the event stream are told separately: wait for both.
        #expect(device.events.wait { _ in device.delegate.resets.count == 1 && device.events.resets.count == 1 })
        let told = try #require(device.events.resets.first)
        #expect(reasons.contains(told))
        #expect(device.events.resets == [told])
        #expect(device.delegate.resets == [told])
        #expect(notifications.value == 1)
        #expect(device.sync.state == .reset(told))
        #expect(!device.sync.isLive)
        #expect(try device.titles() == ["from alpha", "from beta"])
        // The store keeps working; nothing is exported any more, and no second report comes.
        try device.addNote("after the reset")
        device.sync.waitForQueuedWork()
        #expect(try device.titles() == ["after the reset", "from alpha", "from beta"])
        #expect(device.events.resets.count == 1)
        #expect(notifications.value == 1)
    }

    @Test(
        "the container deleted while syncing: reported once, local data intact",
        arguments: SentinelTests.Strategy.allCases
    )
    func containerDeleted(strategy: SentinelTests.Strategy) throws {
        let bench = try Self.syncingPair(strategy)
        let notifications = ResetNotificationCounter(bench["alpha"].sync)
        // As `rm -r` does while live sync writes (an acknowledgement, a baseline): a file renamed or
        // removed under the walk is gone already; the walk goes on until nothing is left.
        for _ in 0..<20 where FileManager.default.fileExists(atPath: bench.container.path) {
            try? FileManager.default.removeItem(at: bench.container)
        }
        #expect(!FileManager.default.fileExists(atPath: bench.container.path))
        #expect(
            bench["alpha"].events.wait { _ in bench["alpha"].events.resets.count == 1 },
            "resets: \(bench["alpha"].events.resets)"
        )
        try Self.expectStoppedOnce(bench["alpha"], notifications, reasons: [.containerDeleted])
        #expect(bench["beta"].events.wait { _ in bench["beta"].events.resets == [.containerDeleted] })
        // A container that comes back does not restart sync by itself, nor report again.
        try FileManager.default.createDirectory(at: bench.container, withIntermediateDirectories: true)
        try bench["alpha"].addNote("once more")
        bench["alpha"].sync.waitForQueuedWork()
        #expect(bench["alpha"].events.resets.count == 1)
        #expect(bench["alpha"].sync.state == .reset(bench["alpha"].events.resets[0]))
    }

    @Test(
        "this device's registration removed while syncing: reported once, the others go on",
        arguments: SentinelTests.Strategy.allCases
    )
    func registrationRemoved(strategy: SentinelTests.Strategy) throws {
        let bench = try Self.syncingPair(strategy)
        let notifications = ResetNotificationCounter(bench["alpha"].sync)
        // Someone (here: the other device's view of the sentinel) removes alpha.
        try bench["beta"].sync.sentinel.unregister("alpha")
        try Self.expectStoppedOnce(bench["alpha"], notifications, reasons: [.registrationRemoved])
        // beta keeps syncing; alpha's later notes never reach it, beta's own save goes on.
        #expect(bench["beta"].sync.state == .syncing)
        try bench["beta"].addNote("beta goes on")
        bench["beta"].sync.waitForQueuedWork()
        #expect(try bench["beta"].titles() == ["beta goes on", "from alpha", "from beta"])
        #expect(bench["beta"].events.resets.isEmpty)
    }

    @Test("a reset device enables again as a returning device")
    func enablingAfterAReset() throws {
        let bench = try Self.syncingPair(.deviceFiles)
        try bench["beta"].sync.sentinel.unregister("alpha")
        #expect(bench["alpha"].events.wait { _ in bench["alpha"].sync.state == .reset(.registrationRemoved) })
        try bench["alpha"].addNote("while stopped")
        // The default policy: others are registered, so the container's data replaces alpha's.
        #expect(try bench["alpha"].sync.enable().state == .syncing)
        let join = try #require(bench["alpha"].events.joins.last)
        #expect(join.situation == .returningDevice(others: ["beta"]))
        #expect(join.choice == .replaceLocalWithContainer)
        #expect(try bench["alpha"].titles() == ["from alpha", "from beta"])
        #expect(try bench["alpha"].sync.sentinel.isRegistered("alpha"))
        // And it syncs again, both ways.
        try bench["alpha"].addNote("alpha is back")
        #expect(bench["beta"].waitForTitles(["alpha is back", "from alpha", "from beta"]))
        try bench["beta"].addNote("welcome")
        #expect(bench["alpha"].waitForTitles(["alpha is back", "from alpha", "from beta", "welcome"]))
    }
}

extension ContainerResetTests {
    @Test(
        "an app that drives sync itself asks: the container removed stops sync once with the reason, and the data stays; a container as it was stops nothing"
    )
    func checkForResetByHand() throws {
        let bench = try SyncTestBench.syncing(["alpha", "beta"])
        try bench.addNote("alpha", "kept")
        #expect(bench["alpha"].sync.checkForReset() == nil)
        #expect(bench["alpha"].sync.state == .syncing)
        try FileManager.default.removeItem(
            at: ContainerLayout(container: bench["alpha"].view, storeName: SyncTestBench.storeName).storeFolder
        )
        #expect(bench["alpha"].sync.checkForReset() == .containerDeleted)
        #expect(bench["alpha"].sync.state == .reset(.containerDeleted))
        #expect(bench["alpha"].sync.checkForReset() == nil, "told once")
        #expect(try bench.titles("alpha") == ["kept"])
    }
}

import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import Testing

/// Enabling sync: each choice, for a device new to the container and for one that synced before.
@Suite("Sync stoppage and joining", .serialized)
struct SyncStoppageTests {
    @Test("the default policy")
    func defaultPolicy() {
        let policy = SyncJoinPolicy.default
        #expect(policy.choose(.newDevice(others: ["a"])) == .mergeLocalIntoContainer)
        #expect(policy.choose(.newDevice(others: [])) == .mergeLocalIntoContainer)
        #expect(policy.choose(.returningDevice(others: [])) == .replaceContainerWithLocal)
        #expect(policy.choose(.returningDevice(others: ["a"])) == .replaceLocalWithContainer)
    }

    /// alpha syncing with a note; beta with a note of its own, not yet enabled.
    static func containerAndNewcomer() throws -> LifecycleBench {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha", notes: ["alpha's"])
        #expect(try alpha.sync.enable().state == .syncing)
        #expect(alpha.events.joins.map(\.situation) == [.newContainer])
        #expect(alpha.events.joins.first?.recordsExported == 1)
        try bench.addDevice("beta", notes: ["beta's"])
        return bench
    }

    @Test("a new device merges its data into the container")
    func newDeviceMerges() throws {
        let bench = try Self.containerAndNewcomer()
        #expect(try bench["beta"].sync.enable(policy: .always(.mergeLocalIntoContainer)).state == .syncing)
        let join = try #require(bench["beta"].events.joins.first)
        #expect(join.situation == .newDevice(others: ["alpha"]))
        #expect(join.recordsExported == 1 && join.changesImported >= 1)
        #expect(try bench["beta"].titles() == ["alpha's", "beta's"])
        #expect(bench["alpha"].waitForTitles(["alpha's", "beta's"]))
    }

    @Test("a new device adopts the container's data")
    func newDeviceAdopts() throws {
        let bench = try Self.containerAndNewcomer()
        #expect(try bench["beta"].sync.enable(policy: .always(.replaceLocalWithContainer)).state == .syncing)
        let join = try #require(bench["beta"].events.joins.first)
        #expect(join.choice == .replaceLocalWithContainer && join.recordsReplaced == 1)
        #expect(try bench["beta"].titles() == ["alpha's"])
        // beta's discarded note was never exported: alpha never sees it, even after more syncing.
        try bench["beta"].addNote("beta's second")
        #expect(bench["alpha"].waitForTitles(["alpha's", "beta's second"]))
    }

    /// alpha and beta syncing (a note each), then beta disabled; each edits while apart.
    static func apart() throws -> LifecycleBench {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha")
        let beta = try bench.addDevice("beta")
        try alpha.addNote("alpha's")
        try beta.addNote("beta's")
        try alpha.sync.enable()
        try beta.sync.enable()
        #expect(alpha.waitForTitles(["alpha's", "beta's"]))
        #expect(beta.waitForTitles(["alpha's", "beta's"]))
        try beta.sync.disable()
        #expect(try !alpha.sync.sentinel.isRegistered("beta"))
        try alpha.addNote("alpha while apart")
        try beta.addNote("beta while apart")
        alpha.sync.waitForQueuedWork()
        return bench
    }

    @Test("a returning device replaces its data with the container's")
    func returningReplacesLocal() throws {
        let bench = try Self.apart()
        #expect(try bench["beta"].sync.enable(policy: .always(.replaceLocalWithContainer)).state == .syncing)
        let join = try #require(bench["beta"].events.joins.last)
        #expect(join.situation == .returningDevice(others: ["alpha"]))
        // Its own earlier note (in its own logs) is the container's data too, and is kept.
        #expect(try bench["beta"].titles() == ["alpha while apart", "alpha's", "beta's"])
        #expect(try bench["alpha"].titles() == ["alpha while apart", "alpha's", "beta's"])
        try bench["beta"].addNote("beta back")
        #expect(bench["alpha"].waitForTitles(["alpha while apart", "alpha's", "beta back", "beta's"]))
    }

    @Test("a returning device replaces the container with its data; the others see a reset and choose")
    func returningReplacesContainer() throws {
        let bench = try Self.apart()
        #expect(try bench["beta"].sync.enable(policy: .always(.replaceContainerWithLocal)).state == .syncing)
        #expect(try bench["beta"].titles() == ["alpha's", "beta while apart", "beta's"])
        // alpha's registration went with the old container: alpha stops, keeping its data.
        // The state changes before the event is delivered: wait for the event itself.
        #expect(
            bench["alpha"].events.wait { _ in bench["alpha"].events.resets.count == 1 },
            "resets: \(bench["alpha"].events.resets)"
        )
        #expect(bench["alpha"].sync.state != .syncing)
        #expect(bench["alpha"].events.resets.count == 1)
        #expect(try bench["alpha"].titles() == ["alpha while apart", "alpha's", "beta's"])
        // alpha comes back taking the container's data: both hold beta's.
        #expect(try bench["alpha"].sync.enable(policy: .always(.replaceLocalWithContainer)).state == .syncing)
        #expect(try bench["alpha"].titles() == ["alpha's", "beta while apart", "beta's"])
        try bench["alpha"].addNote("together again")
        #expect(bench["beta"].waitForTitles(["alpha's", "beta while apart", "beta's", "together again"]))
    }

    @Test("a replaced container is recognised even when a sync engine brings this device's registration back")
    func replacedContainerWithResurrectedRegistration() throws {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha", notes: ["alpha's"])
        let beta = try bench.addDevice("beta", notes: ["beta's"])
        try alpha.sync.enable()
        try beta.sync.enable()
        #expect(alpha.waitForTitles(["alpha's", "beta's"]))
        #expect(beta.waitForTitles(["alpha's", "beta's"]))
        alpha.sync.pause()
        let registration = DeviceFileSentinel(layout: alpha.sync.layout).url(of: "alpha")
        let saved = try Data(contentsOf: registration)
        try beta.sync.disable()
        try beta.addNote("beta alone")
        #expect(try beta.sync.enable(policy: .always(.replaceContainerWithLocal)).state == .syncing)
        // The engine on alpha's machine restores the registration it had (a modification beats a deletion).
        try saved.write(to: registration)
        #expect(try alpha.sync.sentinel.isRegistered("alpha"))
        // Resuming does not take the new container for the old one.
        #expect(try alpha.sync.resume().state == .syncing)
        let join = try #require(alpha.events.joins.last)
        #expect(join.situation == .returningDevice(others: ["beta"]))
        #expect(try alpha.titles() == ["alpha's", "beta alone", "beta's"])
    }

    @Test("a returning device merges: both sides' data survive")
    func returningMerges() throws {
        let bench = try Self.apart()
        #expect(try bench["beta"].sync.enable(policy: .always(.mergeLocalIntoContainer)).state == .syncing)
        let all = ["alpha while apart", "alpha's", "beta while apart", "beta's"]
        #expect(try bench["beta"].titles() == all)
        #expect(bench["alpha"].waitForTitles(all))
    }

    @Test(
        "compaction waits for registered devices only; a device joining a compacted container gets the folded history"
    )
    func joiningACompactedContainer() throws {
        let bench = try LifecycleBench.syncing("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        for index in 0..<3 { try alpha.addNote("a\(index)") }
        #expect(beta.waitForTitles(["a0", "a1", "a2"]))
        alpha.sync.waitForQueuedWork()
        // beta leaves without ever acknowledging: it no longer holds alpha's history back.
        try beta.sync.disable()
        try alpha.sync.publishAcknowledgement()
        #expect(try alpha.sync.compact() == 3)
        #expect(try alpha.sync.layout.logSequences(device: "alpha").isEmpty)
        // A new device merging its own note in gets alpha's notes from the baseline.
        let gamma = try bench.addDevice("gamma", notes: ["g"])
        #expect(try gamma.sync.enable().state == .syncing)
        #expect(try gamma.titles() == ["a0", "a1", "a2", "g"])
        #expect(alpha.waitForTitles(["a0", "a1", "a2", "g"]))
    }

    @Test("a device whose peers left (no registration, their logs still there) is not told the container is empty")
    func dataWithoutRegistrations() throws {
        let bench = try Self.apart()
        // alpha leaves too: nobody is registered, but alpha's logs are in the container.
        try bench["alpha"].sync.disable()
        #expect(try bench["beta"].sync.sentinel.contents().registrations.isEmpty)
        #expect(try bench["beta"].sync.enable().state == .syncing)
        let join = try #require(bench["beta"].events.joins.last)
        #expect(join.situation == .returningDevice(others: ["alpha"]))
        // So the default keeps the container's data rather than wiping it.
        #expect(join.choice == .replaceLocalWithContainer)
        #expect(try bench["beta"].titles() == ["alpha while apart", "alpha's", "beta's"])
    }

    @Test(
        "a disable or stop while joining (here from an event observer) wins: the device is not registered, sync does not start"
    )
    func interruptedEnable() throws {
        let bench = try Self.containerAndNewcomer()
        let beta = bench["beta"]
        let observer = NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: beta.sync, queue: nil)
        { note in
            if case .joinProgress? = note.userInfo?["event"] as? SyncEvent { try? beta.sync.disable() }
        }
        defer { NotificationCenter.default.removeObserver(observer) }
        #expect { try beta.sync.enable() } throws: { ($0 as? SyncError)?.code == .invalidState }
        #expect(beta.sync.state == .off)
        #expect(!beta.sync.isLive)
        #expect(try !beta.sync.sentinel.isRegistered("beta"))
    }

    @Test("a join that failed goes on with the choice it made, without asking again")
    func failedJoinKeepsItsChoice() throws {
        let bench = try Self.apart()
        let asked = ChoiceCounter()
        // The first attempt fails after its choice, at registering: a folder is in the way.
        let registration = bench.container.appendingPathComponent("notes/sentinels/beta.plist")
        try FileManager.default.createDirectory(at: registration, withIntermediateDirectories: true)
        let policy = SyncJoinPolicy { _ in
            asked.increment()
            return asked.value == 1 ? .replaceLocalWithContainer : .replaceContainerWithLocal
        }
        #expect(throws: (any Error).self) { try bench["beta"].sync.enable(policy: policy) }
        #expect(asked.value == 1)
        try FileManager.default.removeItem(at: registration)
        #expect(try bench["beta"].sync.enable(policy: policy).state == .syncing)
        #expect(asked.value == 1)
        #expect(bench["beta"].events.joins.last?.choice == .replaceLocalWithContainer)
        #expect(try bench["beta"].titles() == ["alpha while apart", "alpha's", "beta's"])
    }

    @Test("enabling twice, and after a relaunch, resumes without asking")
    func resumingAsksNothing() throws {
        let bench = try Self.containerAndNewcomer()
        let asked = ChoiceCounter()
        let policy = SyncJoinPolicy { situation in
            asked.increment()
            return .mergeLocalIntoContainer
        }
        try bench["beta"].sync.enable(policy: policy)
        try bench["beta"].sync.enable(policy: policy)
        #expect(asked.value == 1)
        // A relaunch: a new FolderSync on the same store.
        bench["beta"].sync.stop()
        let relaunched = try FolderSync(
            coordinator: bench["beta"].coordinator,
            store: bench["beta"].store,
            container: bench.container,
            storeName: "notes"
        )
        defer { relaunched.stop() }
        let events = SyncEventWaiter(relaunched)
        #expect(relaunched.deviceID == "beta")
        #expect(try relaunched.enable(policy: policy).state == .syncing)
        #expect(asked.value == 1)
        #expect(events.joins.map(\.situation) == [.resuming])
    }
}

final class ChoiceCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

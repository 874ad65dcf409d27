import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import Testing

/// The lifecycle converges too: a device that comes back, with each join choice, or whose store
/// was lost, keeps exactly what the choice promises; deletions made meanwhile stay deleted.
@Suite("Lifecycle convergence", .serialized)
struct LifecycleConvergenceTests {
    /// alpha and beta syncing two notes; then beta disables, alpha deletes one note and ranks the
    /// other, and beta (while off) retitles the ranked one.
    static func apart() throws -> (LifecycleBench, kept: ObjectID, deleted: ObjectID) {
        let bench = try LifecycleBench.syncing("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        let kept = try alpha.addNote("kept")
        let deleted = try alpha.addNote("deleted")
        #expect(beta.waitForTitles(["deleted", "kept"]))
        try beta.sync.disable()
        try alpha.edit { context in
            try context.delete(deleted)
            var record = try #require(try context.record(with: kept))
            record["rank"] = .integer(5)
            try context.update(record)
        }
        try beta.edit { context in
            var record = try #require(try context.record(with: kept))
            record["title"] = .string("kept, retitled by beta")
            try context.update(record)
        }
        alpha.sync.waitForQueuedWork()
        return (bench, kept, deleted)
    }

    @Test(
        "a returning device that merges brings back nothing deleted meanwhile and overwrites nothing it did not edit (D)"
    )
    func returningMergeKeepsDeletionsAndOthersWrites() throws {
        let (bench, kept, deleted) = try Self.apart()
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        #expect(try beta.sync.enable(policy: .always(.mergeLocalIntoContainer)).state == .syncing)
        #expect(beta.events.joins.last?.situation == .returningDevice(others: ["alpha"]))
        #expect(beta.events.joins.last?.recordsExported == 0, "nothing is exported as a new creation")
        for device in [alpha, beta] {
            #expect(device.waitForTitles(["kept, retitled by beta"]), "\(device.name): \((try? device.titles()) ?? [])")
            #expect(try device.store.records(with: [deleted]).isEmpty, "\(device.name) brought the deletion back")
            let record = try #require(try device.store.records(with: [kept]).first)
            #expect(record["rank"] == .integer(5), "\(device.name): alpha's rank was overwritten")
        }
    }

    @Test(
        "a returning device that replaces its data with the container's keeps none of its own edits from while it was away"
    )
    func returningReplaceLocal() throws {
        let (bench, kept, deleted) = try Self.apart()
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        #expect(try beta.sync.enable(policy: .always(.replaceLocalWithContainer)).state == .syncing)
        #expect(try beta.titles() == ["kept"])
        #expect(try beta.store.records(with: [deleted]).isEmpty)
        #expect(try beta.store.records(with: [kept]).first?["rank"] == .integer(5))
        // And it syncs on: no gap in its numbering holds the others back.
        try beta.addNote("beta back")
        #expect(alpha.waitForTitles(["beta back", "kept"]))
    }

    @Test(
        "a returning device that replaces its data keeps its last save from before it left, which the container holds (simulation seed 653)"
    )
    func replaceLocalKeepsItsExportedLastSave() throws {
        let bench = try LifecycleBench.syncing("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        _ = try alpha.addNote("first")
        #expect(beta.waitForTitles(["first"]))
        // beta's last save before it leaves: exported (the container holds it), and no later save
        // moved its export mark past it.
        _ = try beta.addNote("last before away")
        beta.sync.waitForQueuedWork()
        #expect(alpha.waitForTitles(["first", "last before away"]))
        try beta.sync.disable()
        #expect(try beta.sync.enable(policy: .always(.replaceLocalWithContainer)).state == .syncing)
        beta.sync.waitForQueuedWork()
        try beta.sync.exportPending()
        // Its own log is part of the container's data: kept, not emptied or renumbered.
        #expect(
            beta.events.events.contains { if case .logConflict = $0 { true } else { false } } == false,
            "\(beta.events.events)"
        )
        _ = try beta.addNote("back")
        for device in [alpha, beta] {
            #expect(
                device.waitForTitles(["back", "first", "last before away"]),
                "\(device.name): \((try? device.titles()) ?? [])"
            )
        }
    }

    @Test("a returning device that replaces the container: the others see a reset, rejoin, and all hold its data")
    func returningReplaceContainer() throws {
        let (bench, _, deleted) = try Self.apart()
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        #expect(try beta.sync.enable(policy: .always(.replaceContainerWithLocal)).state == .syncing)
        #expect(alpha.events.wait { _ in alpha.events.resets.count == 1 }, "resets: \(alpha.events.resets)")
        #expect(try alpha.sync.enable(policy: .always(.replaceLocalWithContainer)).state == .syncing)
        let expected = ["deleted", "kept, retitled by beta"]
        #expect(
            try alpha.titles() == expected,
            "beta's data is the container's: its copy of the note alpha deleted included"
        )
        #expect(try alpha.store.records(with: [deleted]).count == 1)
        try alpha.addNote("alpha again")
        #expect(beta.waitForTitles(["alpha again"] + expected))
    }

    @Test(
        "a device whose store was lost, joining with a fresh store under its old name, is recognised, gets its own saves back and exports again (E)"
    )
    func lostStoreRejoins() throws {
        let bench = try LifecycleBench.syncing("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        try alpha.addNote("alpha's")
        try beta.addNote("beta's first")
        try beta.addNote("beta's second")
        beta.sync.waitForQueuedWork()
        #expect(alpha.waitForTitles(["alpha's", "beta's first", "beta's second"]))
        let before = try beta.sync.layout.logSequences(device: "beta")

        let fresh = try bench.loseStore("beta", notes: ["made on the new machine"])
        #expect(try fresh.sync.enable().state == .syncing)
        let join = try #require(fresh.events.joins.last)
        #expect(join.situation == .restoringDevice(others: ["alpha"], ownLogs: before.last ?? 0))
        #expect(join.choice == .mergeLocalIntoContainer)
        #expect(try fresh.titles() == ["alpha's", "beta's first", "beta's second", "made on the new machine"])
        // It exports again, past its old numbers and a leap over those where old logs may still
        // arrive, and the others get it.
        try fresh.addNote("beta after the loss")
        fresh.sync.waitForQueuedWork()
        let after = try fresh.sync.layout.logSequences(device: "beta")
        let first = (before.last ?? 0) + FolderSync.restoreLeap + 1
        #expect(
            after.count > before.count && after == before + Array(first..<first + UInt64(after.count - before.count)),
            "\(after)"
        )
        #expect(
            alpha.waitForTitles([
                "alpha's", "beta after the loss", "beta's first", "beta's second", "made on the new machine",
            ])
        )
        #expect(fresh.events.events.allSatisfy { if case .logConflict = $0 { return false } else { return true } })
    }

    @Test(
        "a device whose store was lost publishes its own earlier logs again, from what it got back, when they vanish from the container"
    )
    func restoredDeviceHealsItsOldLogs() throws {
        // Sync by hand: nobody compacts, so no baseline covers the logs, and only beta's store
        // can publish them again.
        let bench = try LifecycleBench.syncingByHand("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        try beta.addNote("beta's first")
        try beta.addNote("beta's second")
        #expect(try beta.sync.exportPending() == 2)
        try alpha.sync.importAvailable()
        #expect(try alpha.titles() == ["beta's first", "beta's second"])
        let fresh = try bench.loseStore("beta")
        #expect(try fresh.sync.enable(live: false).state == .syncing)
        #expect(try fresh.titles() == ["beta's first", "beta's second"])
        // Log 1 vanishes from the container: only beta can publish it again, and its new store
        // holds it only because it got its own history back.
        let first = fresh.sync.layout.logURL(device: "beta", sequence: 1)
        let bytes = try Data(contentsOf: first)
        try FileManager.default.removeItem(at: first)
        try fresh.sync.importAvailable()
        #expect(try Data(contentsOf: first) == bytes)
        #expect(
            fresh.events.events.contains {
                if case .republished(let url) = $0 { url.lastPathComponent == first.lastPathComponent } else { false }
            }
        )
        // A device that joins now gets everything from those logs.
        let gamma = try bench.addDevice("gamma")
        #expect(try gamma.sync.enable(live: false).state == .syncing)
        #expect(try gamma.titles() == ["beta's first", "beta's second"])
    }

    @Test(
        "a device that merges into a container another device replaced keeps its deletions made after the replacement, on every device, even when the replacing device's clock runs ahead: the records go in with their clocks, not as new creations",
        arguments: [0, 60_000] as [UInt64],
        [SyncJoinChoice.mergeLocalIntoContainer, .replaceLocalWithContainer]
    )
    func mergeIntoReplacedContainerCarriesLaterDeletions(betaAhead: UInt64, choice: SyncJoinChoice) throws {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha")
        // With beta's clock a minute ahead, its replacement, were it stamped anew, would beat
        // alpha's later deletion.
        let beta = try bench.addDevice("beta", clockAhead: betaAhead)
        for device in [alpha, beta] { #expect(try device.sync.enable().state == .syncing) }
        let note = try alpha.addNote("shared")
        _ = try alpha.addNote("kept")
        #expect(beta.waitForTitles(["kept", "shared"]))
        try alpha.sync.disable()
        try beta.sync.disable()
        #expect(try beta.sync.enable(policy: .always(.replaceContainerWithLocal)).state == .syncing)
        // alpha, away and not yet aware of the replacement, deletes a note it had seen beta hold.
        try alpha.edit { context in try context.delete(note) }
        #expect(try alpha.sync.enable(policy: .always(.mergeLocalIntoContainer)).state == .syncing)
        for device in [alpha, beta] {
            #expect(device.waitForTitles(["kept"]), "\(device.name): \((try? device.titles()) ?? [])")
        }
        // A third device joining the new container with either choice holds the same.
        let gamma = try bench.addDevice("gamma", notes: choice == .mergeLocalIntoContainer ? ["own"] : [])
        #expect(try gamma.sync.enable(policy: .always(choice)).state == .syncing)
        let expected = choice == .mergeLocalIntoContainer ? ["kept", "own"] : ["kept"]
        for device in [alpha, beta, gamma] {
            #expect(device.waitForTitles(expected), "\(device.name): \((try? device.titles()) ?? [])")
        }
    }

    @Test(
        "a device whose clock runs ahead merges into a container another device replaced: its stale copy of a note it never edited does not overwrite the newer title the replacement carried"
    )
    func mergeByAClockAheadKeepsNewerWrites() throws {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha", clockAhead: 60_000)
        let beta = try bench.addDevice("beta")
        for device in [alpha, beta] { #expect(try device.sync.enable().state == .syncing) }
        let note = try beta.addNote("first")
        #expect(alpha.waitForTitles(["first"]))
        // alpha leaves; beta retitles the note, then replaces the container with its data.
        try alpha.sync.disable()
        try beta.edit { context in
            var record = try #require(try context.record(with: note))
            record["title"] = .string("second")
            try context.update(record)
        }
        try beta.sync.disable()
        #expect(try beta.sync.enable(policy: .always(.replaceContainerWithLocal)).state == .syncing)
        // alpha merges what it holds: "first", as old as beta's creation, is older than "second".
        #expect(try alpha.sync.enable(policy: .always(.mergeLocalIntoContainer)).state == .syncing)
        for device in [alpha, beta] {
            #expect(device.waitForTitles(["second"]), "\(device.name): \((try? device.titles()) ?? [])")
        }
    }

    @Test(
        "a device that wrote a log into a replaced container before it saw the replacement, then joins it, holds nobody back: that log and the numbers before it go out empty",
        arguments: [SyncJoinChoice.mergeLocalIntoContainer, .replaceLocalWithContainer]
    )
    func logWrittenIntoReplacedContainerHoldsNobodyBack(choice: SyncJoinChoice) throws {
        let bench = try LifecycleBench.syncing("alpha", "beta", "gamma")
        let (alpha, beta, gamma) = (bench["alpha"], bench["beta"], bench["gamma"])
        // gamma's three logs, which alpha applies: alpha's next log depends on them.
        for title in ["g1", "g2", "g3"] { _ = try gamma.addNote(title) }
        for title in ["one", "two"] { _ = try alpha.addNote(title) }
        let before = ["g1", "g2", "g3", "one", "two"]
        for device in [alpha, beta, gamma] { #expect(device.waitForTitles(before), "\(device.name)") }
        alpha.sync.waitForQueuedWork()
        // alpha sees the replacement late (a sync engine delivers it after alpha's next export).
        alpha.sync.resetGracePeriod = .seconds(600)
        try beta.sync.disable()
        #expect(try beta.sync.enable(policy: .always(.replaceContainerWithLocal)).state == .syncing)
        _ = try alpha.addNote("in the window")
        // (The new identity has not reached alpha yet.)
        try bench.withoutIdentity { try alpha.sync.exportPending() }
        let layout = ContainerLayout(container: bench.container, storeName: "notes")
        let written = try #require(try layout.logSequences(device: "alpha").last)
        #expect(written > 1, "alpha's log went into the replaced container under its old numbering")
        // gamma sees the reset and merges into the new container: its numbering starts anew.
        #expect(gamma.events.wait { _ in gamma.events.resets.count == 1 }, "resets: \(gamma.events.resets)")
        #expect(try gamma.sync.enable(policy: .always(.mergeLocalIntoContainer)).state == .syncing)
        try alpha.sync.disable()
        #expect(try alpha.sync.enable(policy: .always(choice)).state == .syncing)
        // A merge keeps the note alpha made in the window; a replacement gives it up, everywhere.
        let expected = (choice == .mergeLocalIntoContainer ? before + ["in the window"] : before).sorted()
        for device in [alpha, beta, gamma] {
            #expect(device.waitForTitles(expected), "\(device.name): \((try? device.titles()) ?? [])")
        }
    }

    @Test(
        "a device that exports and imports by itself stops when another device replaced the container, writes nothing into it, and joins it when enabled again (also when it had rejoined while its copy of the container lacked the identity file, still filling: it keeps the identity it recorded)",
        arguments: [false, true]
    )
    func manualSyncStopsAtAReplacedContainer(rejoinedWithoutIdentity: Bool) throws {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha")
        let beta = try bench.addDevice("beta")
        #expect(try alpha.sync.enable(live: false).state == .syncing)
        #expect(try beta.sync.enable().state == .syncing)
        _ = try alpha.addNote("before")
        try alpha.sync.exportPending()
        #expect(beta.waitForTitles(["before"]))
        let layout = ContainerLayout(container: bench.container, storeName: "notes")
        if rejoinedWithoutIdentity {
            try alpha.sync.disable()
            let state = try bench.withoutIdentity {
                try alpha.sync.enable(policy: .always(.mergeLocalIntoContainer), live: false).state
            }
            #expect(state == .syncing)
        }
        try beta.sync.disable()
        #expect(try beta.sync.enable(policy: .always(.replaceContainerWithLocal)).state == .syncing)
        _ = try alpha.addNote("after")
        #expect(throws: SyncError.self) { try alpha.sync.exportPending() }
        #expect(alpha.sync.state == .reset(.containerReplaced))
        #expect(alpha.events.resets == [.containerReplaced])
        #expect(try layout.logSequences(device: "alpha").isEmpty, "alpha wrote into the new container")
        #expect(throws: SyncError.self) { try alpha.sync.importAvailable() }
        #expect(try alpha.sync.enable(policy: .always(.mergeLocalIntoContainer), live: false).state == .syncing)
        try alpha.sync.exportPending()
        for device in [alpha, beta] {
            #expect(device.waitForTitles(["after", "before"]), "\(device.name): \((try? device.titles()) ?? [])")
        }
    }

    @Test(
        "a log written for a container another device has since replaced is not applied in the new one: its device gives it up or exports it again when it joins",
        arguments: [SyncJoinChoice.mergeLocalIntoContainer, .replaceLocalWithContainer]
    )
    func logForReplacedContainerIsNotApplied(choice: SyncJoinChoice) throws {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha")
        let beta = try bench.addDevice("beta", notes: ["beta's"])
        #expect(try alpha.sync.enable(live: false).state == .syncing)
        #expect(try beta.sync.enable(live: false).state == .syncing)
        try beta.sync.disable()
        #expect(try beta.sync.enable(policy: .always(.replaceContainerWithLocal), live: false).state == .syncing)
        // alpha, which had applied nothing, has not seen the new identity yet (a sync engine
        // delivers it later): its first log depends on nothing, and says which container it is for.
        try bench.withoutIdentity {
            _ = try alpha.addNote("in the window")
            #expect(try alpha.sync.exportPending() == 1)
            #expect(try alpha.sync.publishAcknowledgement().container != nil)
        }
        // Nor does its acknowledgement count there.
        #expect(!beta.sync.acknowledgements().contains { $0.device == "alpha" })
        let log = bench.container.appendingPathComponent("notes/devices/alpha/0000000000000001.cclog")
        let written = try LogFile.decode(Data(contentsOf: log), url: log)
        #expect(written.container != nil && written.formatVersion == 4)

        // beta does not apply it: it reports it, and asks alpha for it.
        let report = try beta.sync.importAvailable()
        #expect(report.logs == 0)
        #expect(
            beta.events.events.contains { event in
                guard case .corruptLog(let error) = event else { return false }
                return error.url?.lastPathComponent == "0000000000000001.cclog"
                    && error.message.contains("which another device replaced")
            }
        )
        #expect(try beta.titles() == ["beta's"])

        // alpha finds the replacement and joins the new container.
        #expect(throws: SyncError.self) { try alpha.sync.importAvailable() }
        #expect(try alpha.sync.enable(policy: .always(choice), live: false).state == .syncing)
        try alpha.sync.exportPending()
        _ = try beta.sync.importAvailable()
        _ = try alpha.sync.importAvailable()
        let expected = choice == .mergeLocalIntoContainer ? ["beta's", "in the window"] : ["beta's"]
        #expect(try alpha.titles() == expected)
        #expect(try beta.titles() == expected)
    }

    @Test("a store restored from an older backup while registered does not resume over its newer history")
    func restoredBackupDoesNotResume() throws {
        let bench = try LifecycleBench.syncing("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        try beta.addNote("before the backup")
        beta.sync.waitForQueuedWork()
        let storeFile = bench.directory.url.appendingPathComponent("stores/beta.json")
        let backup = try Data(contentsOf: storeFile)
        try beta.addNote("after the backup")
        beta.sync.waitForQueuedWork()
        #expect(alpha.waitForTitles(["after the backup", "before the backup"]))
        let restored = try bench.loseStore("beta")
        restored.sync.stop()
        restored.coordinator.removeStore(restored.store)
        try backup.write(to: storeFile)
        let reopened = try bench.addDevice("beta")
        #expect(try reopened.sync.enable().state == .syncing)
        #expect(
            reopened.events.joins.last.map { if case .restoringDevice = $0.situation { true } else { false } } == true
        )
        #expect(try reopened.titles() == ["after the backup", "before the backup"])
        try reopened.addNote("after the restore")
        #expect(alpha.waitForTitles(["after the backup", "after the restore", "before the backup"]))
    }
    @Test(
        "a returning device that replaces its data gets back its own compacted logs from a baseline that arrives after it joined"
    )
    func replaceLocalGetsItsOwnCompactedHistoryLater() throws {
        let bench = SyncTestBench()
        for name in ["alpha", "beta"] { try bench.addDevice(name).sync.enable(live: false) }
        for title in ["one", "two"] { try bench.addNote("beta", title) }
        // Beta knows of nobody yet: it folds its logs into a baseline and removes them.
        try bench["beta"].sync.publishAcknowledgement()
        #expect(try bench["beta"].sync.compact() == 2)
        let folder = bench.logURL("beta", 1, in: "beta").deletingLastPathComponent()
        let baselines = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter {
            $0.hasSuffix(".ccbase")
        }
        let aside = bench.directory.makeDirectory("aside")
        for name in baselines {
            try FileManager.default.moveItem(
                at: folder.appendingPathComponent(name),
                to: aside.appendingPathComponent(name)
            )
        }
        // Beta leaves and comes back replacing its data while no baseline is in its view (a sync
        // engine removed an older one before a newer one arrived).
        try bench["beta"].sync.disable()
        let join = try bench["beta"].sync.enable(policy: .always(.replaceLocalWithContainer), live: false).join
        #expect(join?.choice == .replaceLocalWithContainer)
        #expect(try bench.titles("beta").isEmpty)
        for name in baselines {
            try FileManager.default.moveItem(
                at: aside.appendingPathComponent(name),
                to: folder.appendingPathComponent(name)
            )
        }
        try bench.importOn("beta", after: 60_000)
        #expect(try bench.titles("beta") == ["one", "two"], "its own exported saves are the container's data too")
    }
}

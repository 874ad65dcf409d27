import FolderSync
import Foundation
import Persistence
import SyncTestKit
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
        "the device that replaced the container refuses the replaced container's logs while its copy lacks the identity file, and does not take itself for replaced when the file is back"
    )
    func replacerRefusesTheReplacedContainersLogsWithoutItsIdentityInSight() throws {
        let bench = try LifecycleBench.syncingByHand("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        _ = try alpha.addNote("one")
        try alpha.sync.exportPending()
        _ = try beta.sync.importAvailable()
        #expect(try beta.titles() == ["one"])
        try beta.sync.disable()
        #expect(try beta.sync.enable(policy: .always(.replaceContainerWithLocal), live: false).state == .syncing)
        // beta's copy of the container lacks the new identity for a while (a sync engine replacing
        // it); alpha, which has not seen the replacement, writes into the container meanwhile.
        try bench.withoutIdentity {
            _ = try alpha.addNote("in the window")
            try alpha.sync.exportPending()
            _ = try beta.sync.importAvailable()
        }
        // beta gave the old container up: alpha's log, written for it, is not applied.
        #expect(try beta.titles() == ["one"])
        #expect(beta.sync.checkForReset() == nil, "beta took its own container for a replaced one")
        #expect(beta.sync.state == .syncing)
        // alpha learns of the replacement and merges what it holds: the note comes in that way.
        #expect(alpha.sync.checkForReset() == .containerReplaced)
        #expect(try alpha.sync.enable(policy: .always(.mergeLocalIntoContainer), live: false).state == .syncing)
        try alpha.sync.exportPending()
        _ = try beta.sync.importAvailable()
        #expect(try beta.titles() == ["in the window", "one"])
        #expect(beta.sync.checkForReset() == nil)
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

    @Test(
        "a device that joined while its copy of the container lacked the identity file (still filling) records the identity when it appears: when another device then replaces the container, it stops and writes nothing into the new one"
    )
    func identityThatAppearsAfterTheJoinIsRecorded() throws {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha")
        #expect(try alpha.sync.enable(live: false).state == .syncing)
        _ = try alpha.addNote("before")
        try alpha.sync.exportPending()
        let gamma = try bench.withoutIdentity {
            let gamma = try bench.addDevice("gamma")
            #expect(try gamma.sync.enable(live: false).state == .syncing)
            return gamma
        }
        try gamma.sync.importAvailable()
        #expect(try gamma.titles() == ["before"])
        // alpha replaces the container; gamma saves before it has looked again.
        try alpha.sync.disable()
        #expect(try alpha.sync.enable(policy: .always(.replaceContainerWithLocal), live: false).state == .syncing)
        _ = try gamma.addNote("after")
        #expect(throws: SyncError.self) { try gamma.sync.exportPending() }
        #expect(gamma.sync.state == .reset(.containerReplaced))
        let layout = ContainerLayout(container: bench.container, storeName: "notes")
        #expect(try layout.logSequences(device: "gamma").isEmpty, "gamma wrote into the new container")
    }

    @Test(
        "a device with no history in the container that replaces it while the identity file cannot be read (cut short by an engine still writing it) lists the identity it recorded as replaced: the others stop instead of taking the new identity for a second start of theirs"
    )
    func replacementOverAnUnreadableIdentityNamesTheRecordedOne() throws {
        let bench = LifecycleBench()
        let (alpha, gamma) = (try bench.addDevice("alpha"), try bench.addDevice("gamma"))
        #expect(try alpha.sync.enable(live: false).state == .syncing)
        _ = try alpha.addNote("alpha's")
        try alpha.sync.exportPending()
        #expect(try gamma.sync.enable(live: false).state == .syncing)
        try gamma.sync.disable()
        // gamma left nothing in the container; its copy of the identity is cut short.
        let identity = bench.container.appendingPathComponent("notes/container.plist")
        let whole = try Data(contentsOf: identity)
        let old = try PropertyListDecoder().decode(ContainerIdentity.self, from: whole).id
        try whole.prefix(whole.count / 2).write(to: identity)
        #expect(try gamma.sync.enable(policy: .always(.replaceContainerWithLocal), live: false).state == .syncing)
        let replacement = try PropertyListDecoder().decode(
            ContainerIdentity.self,
            from: Data(contentsOf: identity)
        )
        #expect(replacement.id != old)
        #expect(replacement.replaces?.contains(old) == true, "\(replacement)")
        _ = try alpha.addNote("alpha's after")
        #expect(throws: SyncError.self) { try alpha.sync.exportPending() }
        #expect(alpha.sync.state == .reset(.containerReplaced))
    }

    @Test(
        "a device that applied logs of a container it had not recorded (started again after a deletion, its identity not arrived) is told when an identity replaces that container: it holds what the others gave up with it"
    )
    func replacementOfAContainerWhoseLogsWereAppliedStopsTheDevice() throws {
        let bench = LifecycleBench()
        let (alpha, beta) = (try bench.addDevice("alpha"), try bench.addDevice("beta"))
        #expect(try alpha.sync.enable(live: false).state == .syncing)
        #expect(try beta.sync.enable(live: false).state == .syncing)
        try FileManager.default.removeItem(at: bench.container)
        #expect(alpha.sync.checkForReset() == .containerDeleted)
        #expect(beta.sync.checkForReset() == .containerDeleted)
        // beta starts the folder again and writes into it; its identity does not reach alpha's
        // copy, so alpha starts its own and takes beta's log in.
        try FileManager.default.createDirectory(at: bench.container, withIntermediateDirectories: true)
        #expect(try beta.sync.enable(policy: .always(.mergeLocalIntoContainer), live: false).state == .syncing)
        _ = try beta.addNote("beta's")
        try beta.sync.exportPending()
        let identity = bench.container.appendingPathComponent("notes/container.plist")
        let betas = try PropertyListDecoder().decode(
            ContainerIdentity.self,
            from: Data(contentsOf: identity)
        )
        try FileManager.default.removeItem(at: identity)
        #expect(try alpha.sync.enable(policy: .always(.mergeLocalIntoContainer), live: false).state == .syncing)
        #expect(try alpha.titles() == ["beta's"])
        #expect(alpha.sync.checkForReset() == nil)
        // Another device replaced beta's container (it never saw alpha's identity): its identity
        // reaches alpha's copy as a conflict copy of alpha's own.
        let replacement: [String: Any] = [
            "id": UUID().uuidString, "created": Date(), "device": "gamma", "replaces": [betas.id],
        ]
        try PropertyListSerialization.data(fromPropertyList: replacement, format: .binary, options: 0).write(
            to: bench.container.appendingPathComponent("notes/container.sync-conflict-20261207-000000-GAMMA.plist")
        )
        #expect(alpha.sync.checkForReset() == .containerReplaced)
    }

    @Test(
        "a device that removed a duplicate and then replaces its data with a new container's forgets the removal with its clocks: the removed record, brought back by another device, keeps the references filed into it"
    )
    func replacedLocalDataForgetsRemovedDuplicates() throws {
        let bench = LifecycleBench()
        let (beta, gamma) = (try bench.addDevice("beta"), try bench.addDevice("gamma"))
        for device in [beta, gamma] {
            device.coordinator.policies.register(Deduplicate("Folder", .key(["name"])))
            #expect(try device.sync.enable(live: false).state == .syncing)
        }
        // gamma's folder loses to beta's on beta: beta notes the removal (and where references go).
        let (winner, loser) = (DuplicateRedirectTests.winner, DuplicateRedirectTests.loser)
        try gamma.edit { _ = try $0.insert(entity: "Folder", id: loser, values: ["name": .string("Work")]) }
        try gamma.sync.exportPending()
        try beta.edit { _ = try $0.insert(entity: "Folder", id: winner, values: ["name": .string("Work")]) }
        try beta.sync.exportPending()
        try beta.sync.importAvailable()
        #expect(try beta.store.records(with: [loser]).isEmpty)
        // The container goes; beta takes the new one's data (nothing), then gamma merges its own
        // folder in, and files a note into it.
        try FileManager.default.removeItem(at: bench.container)
        #expect(beta.sync.checkForReset() == .containerDeleted)
        #expect(gamma.sync.checkForReset() == .containerDeleted)
        try FileManager.default.createDirectory(at: bench.container, withIntermediateDirectories: true)
        #expect(try beta.sync.enable(policy: .always(.replaceLocalWithContainer), live: false).state == .syncing)
        #expect(try gamma.sync.enable(policy: .always(.mergeLocalIntoContainer), live: false).state == .syncing)
        try beta.sync.importAvailable()
        let note = try gamma.addNote("filed")
        try gamma.edit { context in try context.setTarget(loser, forKey: "folder", of: note) }
        try gamma.sync.exportPending()
        try beta.sync.importAvailable()
        #expect(try beta.store.records(with: [note]).first?.toOne["folder"] == loser)
        #expect(
            try SyncSimulator.schema.entities.flatMap { try beta.store.fetch(FetchRequest(entity: $0.name)) }
                == SyncSimulator.schema.entities.flatMap { try gamma.store.fetch(FetchRequest(entity: $0.name)) }
        )
    }
}

import FolderSync
import Foundation

// The container removed while devices sync: a user deletes the shared folder, or an engine
// carries a deletion of it to every copy. Each device that syncs is told at its next look and
// stops, keeping its data; paused and disabled devices find out when they come back. The folder
// comes back empty with the first device that enables sync again, each with a join choice
// (``changePhase(of:replacing:)``), and the ledger holds every device to what its choice promises
// (``noteJoin(of:chosen:)``), as for a container replaced under it.

extension SyncSimulator {
    /// The container goes from every copy at once, with every file on its way.
    func removeContainer() throws {
        // A device that lost its store and has not restored some of its earlier saves from the
        // container yet cannot merge them back into the new one: they live on only in devices
        // that applied them and merge (a device that chooses replaceLocalWithContainer drops its
        // copy). Given up, as saves that had reached the container.
        var unrestored: [String] = []
        for index in restoring.keys.sorted() {
            let gone = try notRestored(restoring[index] ?? [], on: index)
            ledger.giveUp(gone, exported: Set(gone))
            if !gone.isEmpty { unrestored.append("\(devices[index].name) \(gone.count)") }
        }
        restoring = [:]
        pending.removeAll()
        for index in devices.indices {
            queued[index] = [:]
            let notes = devices[index].view.appendingPathComponent("notes")
            if FileManager.default.fileExists(atPath: notes.path) { try FileManager.default.removeItem(at: notes) }
            // (Its own logs lost from a copy are lost with the rest: a join exports again.)
            lostLogs[index] = []
            replacedWhileAway.insert(index)
        }
        var told: [String] = []
        for index in devices.indices where phases[index] == .syncing {
            // Its next look tells it (one process; the others stop too): sync stops, the data stays.
            let processes = devices[index].processes
            _ = processes[random.below(processes.count)].sync.checkForReset()
            if processes.contains(where: { if case .reset = $0.sync.state { true } else { false } }) {
                for other in processes where other.sync.state == .syncing { other.sync.pause() }
                phases[index] = .disabled
            }
            told.append("\(devices[index].name): \(processes.map { "\($0.sync.state)" }.joined(separator: ", "))")
        }
        trace.append(
            "\(step): the container was removed; \(told.joined(separator: "; "))"
                + (unrestored.isEmpty ? "" : "; earlier saves not restored: \(unrestored.joined(separator: ", "))")
        )
    }

    /// The saves among `saves` (of device `index`'s earlier life) whose logs its store has not
    /// applied (a save that logged nothing the simulation knows of counts as not applied).
    func notRestored(_ saves: Set<Int>, on index: Int) throws -> [Int] {
        let store = devices[index].store
        try store.refresh()
        return try saves.sorted().filter { save in
            guard let number = logNumbers[save], let name = logDevices[save] else { return true }
            let appliedKey = SyncMetadata.applied(name)
            let versionsKey = SyncMetadata.versionsApplied(name)
            let entries = try store.syncMetadata([appliedKey, versionsKey])
            guard
                let applied = entries[appliedKey],
                number <= applied.through || applied.extra.contains(number)
            else { return true }
            // (A number leapt over counts as applied with the leap: its log is held only once
            // applied as a late version.)
            if let versions = entries[versionsKey],
                versions.isVoid(number), versions.digests[number] == nil
            {
                return true
            }
            return false
        }
    }
}

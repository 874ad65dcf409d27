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
        trace.append("\(step): the container was removed; \(told.joined(separator: "; "))")
    }
}

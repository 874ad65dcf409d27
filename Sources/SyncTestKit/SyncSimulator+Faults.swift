import FolderSync
import Foundation
import Persistence
import Synchronization

/// What the simulated devices' local saves did and what repairs acted on, to check the
/// invariants against: no acknowledged save lost, no deleted record back, no repair of a
/// reference whose target nobody deleted.
public final class SimulationLedger: Sendable {
    private struct State {
        var created: [ObjectID: UInt64] = [:]
        var deleted: [ObjectID: UInt64] = [:]
        var repaired: [(record: ObjectID, target: ObjectID, state: MissingTargetState?)] = []
    }
    private let state = Mutex(State())

    /// Notes the records a local save (at `step`) created and deleted.
    func record(_ changes: ChangeSet, step: UInt64) {
        state.withLock { state in
            for record in changes.inserted { state.created[record.id] = step }
            for id in changes.deleted { state.deleted[id] = step }
        }
    }

    /// Notes that a repair policy acted on `record`'s reference to `target`.
    func repaired(_ record: ObjectID, target: ObjectID, state targetState: MissingTargetState?) {
        state.withLock { $0.repaired.append((record, target, targetState)) }
    }

    /// What breaks the invariants, given every device's final records (empty when all hold).
    /// Deterministic ids, which several devices make and make again, are left out of the
    /// deletion check: their fate is decided by clocks, not by the order of the steps.
    public func violations(finalContents: [[Record]], deviceNames: [String]) -> [String] {
        state.withLock { state in
            var problems: [String] = []
            for (contents, name) in zip(finalContents, deviceNames) {
                let present = Set(contents.map(\.id))
                for (id, step) in state.created.sorted(by: { $0.key < $1.key }) where state.deleted[id] == nil && !present.contains(id) {
                    problems.append("\(name) lost \(id), saved at step \(step) and never deleted")
                }
                for (id, step) in state.deleted.sorted(by: { $0.key < $1.key }) where present.contains(id) && !Self.isDeterministic(id) {
                    problems.append("\(name) holds \(id), deleted at step \(step)")
                }
            }
            for repair in state.repaired where state.deleted[repair.target] == nil {
                problems.append("\(repair.record) was repaired for \(repair.target) (\(repair.state.map(\.rawValue) ?? "?")), which nobody deleted")
            }
            return problems
        }
    }

    static func isDeterministic(_ id: ObjectID) -> Bool {
        (0..<3).contains { id == ObjectID.deterministic(entity: id.entity, name: "shared \($0)") }
    }
}

/// The simulator's repair policy: clears references to deleted records (as
/// ``ClearMissingReferences``) and tells the ledger what it acted on.
struct RecordingRepair: ValidationRepairPolicy {
    let entityName: String
    let ledger: SimulationLedger

    func repair(_ record: Record, violations: [ValidationViolation], in context: ObjectContext) throws -> Bool {
        let changed = try ClearMissingReferences(entityName).repair(record, violations: violations, in: context)
        if changed {
            for violation in violations where violation.rule == .missingDestination && violation.targetState != .notArrived {
                if let target = violation.target { ledger.repaired(record.id, target: target, state: violation.targetState) }
            }
        }
        return changed
    }
}

extension SyncSimulator {
    /// `bytes` with one byte flipped in the middle: what a garbling disk or engine leaves.
    static func damaged(_ bytes: Data) -> Data {
        var copy = bytes
        if !copy.isEmpty { copy[copy.startIndex + copy.count / 2] ^= 0x5A }
        return copy
    }

    /// Device `index` loses its store (a new machine, a wiped disk): every process goes, the file
    /// goes, and fresh processes rejoin under the same device name with the default policy.
    func loseStore(of index: Int) throws {
        let device = devices[index]
        for process in device.processes {
            process.sync.stop()
            process.coordinator.removeStore(process.store)
        }
        try FileManager.default.removeItem(at: directory.appendingPathComponent("stores/\(device.name).json"))
        let processes = try openProcesses(index: index, name: device.name)
        devices[index] = Device(name: device.name, processes: processes, view: device.view)
        let join = try processes[0].sync.enable(live: false).join
        publish(from: index)
        trace.append("\(step): \(device.name) lost its store and rejoined: \(join.map(String.init(describing:)) ?? "-")")
    }

    /// What breaks the invariants now (call after ``settle()``).
    public func invariantViolations() throws -> [String] {
        ledger.violations(finalContents: try devices.indices.map(contents), deviceNames: devices.map(\.name))
    }
}

import FolderSync
import Foundation
import Persistence
import Synchronization

/// The simulator's repair policy: clears references to deleted records (as
/// ``ClearMissingReferences``) and tells the ledger what it acted on.
struct RecordingRepair: ValidationRepairPolicy {
    let entityName: String
    let ledger: SimulationLedger

    func repair(_ record: Record, violations: [ValidationViolation], in context: ObjectContext) throws -> Bool {
        let changed = try ClearMissingReferences(entityName).repair(record, violations: violations, in: context)
        if changed {
            for violation in violations
            where violation.rule == .missingDestination && violation.targetState != .notArrived {
                if let target = violation.target {
                    ledger.repaired(record.id, target: target, state: violation.targetState)
                }
            }
        }
        return changed
    }
}

extension SyncSimulator {
    /// A log vanishes from device `index`'s view (a user or a tool deletes it), and the deletion
    /// travels to every other view as a sync engine carries it, its owner's included: the file is
    /// gone from the container for good unless its device publishes it again (when asked, or when
    /// it finds its own log missing). Only logs of devices that are syncing go: one whose store is
    /// lost as well would leave the devices that have not applied it waiting (by design: they ask,
    /// and the app decides through ``SyncEvent/missingLog(device:sequence:url:)``).
    func loseLog(in index: Int) throws {
        let syncing = Set(
            devices.indices.filter { phases[$0] == .syncing }.map { "notes/devices/\(devices[$0].name)/" }
        )
        let logs = try storeFiles(in: index).filter { path in
            path.hasSuffix(".cclog") && syncing.contains { path.hasPrefix($0) } && !path.contains("conflict")
        }
        // (Only a log its device can publish again: one its store keeps. A store lost since the
        // log was written, on a new machine that has not got the log back yet, does not.)
        let publishable = logs.filter { path in
            guard let owner = devices.indices.first(where: { path.hasPrefix("notes/devices/\(devices[$0].name)/") }),
                case .log(let sequence) = ContainerLayout.classify(fileName: (path as NSString).lastPathComponent)
            else { return false }
            return (try? devices[owner].processes[0].store.hasSyncMetadata(SyncMetadata.outboxLog(sequence))) == true
        }
        guard !publishable.isEmpty else { return }
        let relative = publishable[random.below(publishable.count)]
        if let owner = devices.indices.first(where: { relative.hasPrefix("notes/devices/\(devices[$0].name)/") }) {
            lostLogs[owner].insert(relative)
        }
        try FileManager.default.removeItem(at: devices[index].view.appendingPathComponent(relative))
        // The deletion is newer than any copy on its way.
        pending.removeAll { $0.relativePath == relative }
        for target in devices.indices where target != index {
            pending.append(Delivery(relativePath: relative, source: index, target: target, removal: true))
        }
        queued[index][relative] = nil
        trace.append("\(step): lost \(relative) from \(devices[index].name)")
    }

    /// `bytes` with one byte flipped in the middle: what a garbling disk or engine leaves.
    static func damaged(_ bytes: Data) -> Data {
        var copy = bytes
        if !copy.isEmpty { copy[copy.startIndex + copy.count / 2] ^= 0x5A }
        return copy
    }

    /// What breaks the invariants now (call after ``settle()``).
    public func invariantViolations() throws -> [String] {
        let policies = devices[0].coordinator.policies
        // Each store agrees with its own sync history (a record its clocks say exists is there,
        // one they say is gone is not): otherwise no later log would repair it.
        var found = lifecycleProblems
        for device in devices {
            let mismatch = try device.processes[0].sync.historyMismatches()
            if !mismatch.isEmpty { found.append("\(device.name): \(mismatch)") }
        }
        return try found
            + ledger.violations(
                finalContents: try devices.indices.map(contents),
                deviceNames: devices.map(\.name),
                replacement: { device, id in try devices[device].sync.replacement(forMissing: id) },
                uniqueKeys: { record in
                    guard let policy = policies.uniquenessPolicy(for: record.id.entity) else { return nil }
                    switch policy.uniqueness {
                    case .singleton: return []
                    case .key(let attributes): return attributes.map { record[$0] }
                    case .custom(let key): return key(record)
                    }
                }
            )
    }
}

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
    /// `bytes` with one byte flipped in the middle: what a garbling disk or engine leaves.
    static func damaged(_ bytes: Data) -> Data {
        var copy = bytes
        if !copy.isEmpty { copy[copy.startIndex + copy.count / 2] ^= 0x5A }
        return copy
    }

    /// What breaks the invariants now (call after ``settle()``).
    public func invariantViolations() throws -> [String] {
        let policies = devices[0].coordinator.policies
        return try ledger.violations(
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

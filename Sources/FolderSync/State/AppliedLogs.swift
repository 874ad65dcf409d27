import Foundation

/// Which logs of a device are applied, as the store keeps it (``SyncMetadata/applied``): all up
/// to `through`, and `extra` beyond it (logs applied before an earlier one arrived).
package struct AppliedLogs: Codable, Hashable {
    /// Every log from 1 through this one.
    package var through: UInt64 = 0
    /// Logs after `through + 1`, sorted.
    package var extra: [UInt64] = []

    func contains(_ sequence: UInt64) -> Bool {
        (sequence >= 1 && sequence <= through) || extra.contains(sequence)
    }

    /// Applies `sequence`, which follows `previous` of its device (the log names it: the first
    /// after its device's numbering leapt over numbers its old logs may still come under):
    /// once `previous` is applied, the numbers between what is applied and `sequence` are
    /// void. Returns them, `nil` when none.
    mutating func insert(_ sequence: UInt64, following previous: UInt64?) -> ClosedRange<UInt64>? {
        guard let previous, previous <= through, sequence > through + 1 else {
            insert(sequence)
            return nil
        }
        let void = (through + 1)...(sequence - 1)
        through = sequence - 1
        extra.removeAll { $0 <= through }
        insert(sequence)
        return void
    }

    /// Whether a log numbered `sequence`, following `previous` of its device (see
    /// ``insert(_:following:)``), comes next.
    func isNext(_ sequence: UInt64, following previous: UInt64?) -> Bool {
        sequence == through + 1 || (previous.map { $0 <= through } ?? false) && sequence > through
    }

    mutating func insert(_ sequence: UInt64) {
        guard sequence >= 1, !contains(sequence) else { return }
        extra.insert(sequence, at: extra.firstIndex { $0 > sequence } ?? extra.endIndex)
        while let first = extra.first, first == through + 1 {
            through = first
            extra.removeFirst()
        }
    }

    /// What `entries` (read with ``SyncMetadata/applied`` of `device`) say of `device`'s logs.
    static func of(_ device: String, in entries: SyncMetadataSnapshot) -> AppliedLogs {
        entries[SyncMetadata.applied(device)] ?? AppliedLogs()
    }
}

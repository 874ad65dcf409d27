import Foundation
import Persistence

/// What a device keeps about one other device's logs beyond which are applied: the logs it met in
/// more than one version or applied empty (a stand-in, a log given up on), with the payload
/// digests of the versions applied; and the numbers that device's numbering leapt over (a
/// restored device whose old logs may still arrive under them). Another version of such a log,
/// or a log under a number leapt over, is applied when it turns up (``ScanReport/lateVersions``).
public struct LogVersions: Sendable, Hashable, Codable {
    /// For each log, the payload digests of the versions applied.
    public var digests: [UInt64: Set<UInt64>] = [:]
    /// Numbers leapt over, as ranges.
    public var voids: [ClosedRange<UInt64>] = []
    /// When the last leap was noted here.
    public var leapt: Date?
    /// How far a baseline showed that device's history went, when that reaches numbers it leapt
    /// over: those up to here are history (applied with the baseline), not leapt over.
    public var historyThrough: UInt64?

    /// Nothing kept.
    public init(
        digests: [UInt64: Set<UInt64>] = [:],
        voids: [ClosedRange<UInt64>] = [],
        leapt: Date? = nil,
        historyThrough: UInt64? = nil
    ) {
        self.digests = digests
        self.voids = voids
        self.leapt = leapt
        self.historyThrough = historyThrough
    }

    /// The highest number through which this device's logs count as applied in what this device
    /// says and folds (acknowledgements, baselines), given `through`: below the first number
    /// leapt over while old logs may still arrive there (for ``FolderSync/leapWindow`` after
    /// the leap), so that nobody starts past them from a baseline that lacks them, nor removes
    /// them; `through` once the window has passed.
    func position(_ through: UInt64, at now: Date) -> UInt64 {
        guard let first = firstVoid, let leapt,
            now.timeIntervalSince(leapt) < FolderSync.leapWindow
        else { return through }
        return min(through, first - 1)
    }

    /// Notes the numbers `void` as leapt over, at `now`.
    mutating func noteLeap(_ void: ClosedRange<UInt64>, at now: Date) {
        if !voids.contains(void) { voids.append(void) }
        leapt = now
    }

    /// Whether nothing is kept.
    public var isEmpty: Bool { digests.isEmpty && voids.isEmpty }

    /// Whether `sequence` was leapt over.
    public func isVoid(_ sequence: UInt64) -> Bool {
        sequence > (historyThrough ?? 0) && voids.contains { $0.contains(sequence) }
    }

    /// The lowest number leapt over (``isVoid(_:)``), `nil` for none.
    var firstVoid: UInt64? {
        let floor = (historyThrough ?? 0) + 1
        return voids.compactMap { $0.upperBound >= floor ? max($0.lowerBound, floor) : nil }.min()
    }

    /// Notes that the version with payload digest `digest` of log `sequence` is applied.
    mutating func noteApplied(_ sequence: UInt64, digest: UInt64) { digests[sequence, default: []].insert(digest) }
}

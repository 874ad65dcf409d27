import ConcordSystem
import Foundation
import Persistence
import Synchronization

/// Finds and reads the container's baselines (snapshots folded from logs that devices catch up
/// from), reading each file once per process as it is now: the newest, what each covers, one
/// that covers what a device lacks.
final class BaselineReader: SyncPart, Sendable {
    let context: SyncContext
    let identities: ContainerIdentities
    /// What this process knows of the baseline files it read.
    let state = Mutex(BaselineReaderState())

    init(context: SyncContext, identities: ContainerIdentities) {
        self.context = context
        self.identities = identities
    }

    func baselineURL(_ device: String, _ total: UInt64) -> URL {
        let digits = String(total)
        return layout.deviceFolder(device).appendingPathComponent(
            ContainerLayout.baselinePrefix + String(repeating: "0", count: max(0, 16 - digits.count)) + digits + "."
                + ContainerLayout.baselineExtension
        )
    }

    /// The largest total a baseline's name carries (0: none), without reading any.
    func newestBaselineTotal() -> UInt64 {
        var best: UInt64 = 0
        for device in SyncFiles.names(in: layout.devicesFolder)
        where ContainerLayout.isValidDeviceID(device) {
            // (The scanner's listing: a folder of thousands of logs is not listed at every pass.)
            for name in scanner.otherNames(inFolderOf: device)
            where name.hasPrefix(ContainerLayout.baselinePrefix)
                && name.hasSuffix("." + ContainerLayout.baselineExtension)
            {
                let digits = name.dropFirst(ContainerLayout.baselinePrefix.count).dropLast(
                    ContainerLayout.baselineExtension.count + 1
                )
                best = max(best, UInt64(digits) ?? 0)
            }
        }
        return best
    }

    /// The baseline that covers the most, across all devices' folders, checked (see
    /// ``BaselineFile``): its changes are read again, in batches, when they are applied.
    func newestBaseline() -> (device: String, url: URL, baseline: BaselineFile)? {
        var best: (device: String, url: URL, baseline: BaselineFile)?
        let replaced = identities.replacedContainers()
        // The largest totals first (as their names say): each file is read whole to be checked,
        // so one that cannot beat the best checked so far is not read.
        for candidate in baselineCandidates() {
            if let best, candidate.total != .max, candidate.total <= best.baseline.total { continue }
            guard let file = checkedBaseline(candidate, replaced: replaced) else { continue }
            if best.map({ file.total > $0.baseline.total }) ?? true {
                best = (candidate.device, candidate.url, file)
            }
        }
        return best
    }

    /// What the baseline ``newestBaseline()`` returns covers, and its file, without reading again a
    /// file this process has read and checked as it is now (by path and identity: a file replaced
    /// under its name is read again): the decision is ``newestBaseline()``'s, made from what each
    /// file said of itself when it was checked. Reading a baseline costs as much as the store it
    /// folds, so a launch that only asks what the newest covers (joining, an idle import) reads
    /// each one at most once.
    func newestBaselineCovers() -> (url: URL, covers: [String: UInt64])? {
        var best: (url: URL, covers: [String: UInt64], total: UInt64)?
        let replaced = identities.replacedContainers()
        for candidate in baselineCandidates() {
            if let best, candidate.total != .max, candidate.total <= best.total { continue }
            let key = identityKey(candidate.url)
            let facts: BaselineFacts?
            if let known = state.withLock({ $0.checkedBaselineFacts[key] }) {
                facts = known
            } else {
                let file = try? BaselineFile(
                    candidate.url,
                    check: { changes in SyncPayload(changes: changes).malformation(in: self.coordinator.schema) }
                )
                facts = file.map(BaselineFacts.init)
                state.withLock { state in
                    // (Bounded: names change with every compaction; forgetting only costs a read.)
                    if state.checkedBaselineFacts.count >= 256 { state.checkedBaselineFacts.removeAll() }
                    state.checkedBaselineFacts[key] = .some(facts)
                }
            }
            guard let facts, isUsable(facts, as: candidate, replaced: replaced) else { continue }
            let total = BaselinePayload(covers: facts.covers, changes: []).total
            if best.map({ total > $0.total }) ?? true { best = (candidate.url, facts.covers, total) }
        }
        return best.map { ($0.url, $0.covers) }
    }

    /// What the baseline that claims to cover the most claims (its covers and change count),
    /// from the start of each file's payload, none read whole: a claim, not a check (see
    /// ``BaselineFile/claimedStart(at:)``); `nil` when no baseline's claim reads.
    func newestClaim() -> (covers: [String: UInt64], changeCount: UInt64)? {
        var best: (covers: [String: UInt64], changeCount: UInt64, total: UInt64)?
        for candidate in baselineCandidates() {
            if let best, candidate.total != .max, candidate.total <= best.total { continue }
            guard let claim = BaselineFile.claimedStart(at: candidate.url) else { continue }
            let total = BaselinePayload(covers: claim.covers, changes: []).total
            if best.map({ total > $0.total }) ?? true { best = (claim.covers, claim.changeCount, total) }
        }
        return best.map { ($0.covers, $0.changeCount) }
    }

    /// Whether some baseline may cover positions that satisfy `wanted`: one whose payload claims
    /// such positions, or whose claim cannot be read. A `false` answer reads no baseline whole:
    /// checked, a baseline covers what its payload claims, or nothing (it cannot be used).
    func someBaselineMayCover(where wanted: ([String: UInt64]) -> Bool) -> Bool {
        baselineCandidates().contains { candidate in claimedCovers(candidate.url).map(wanted) ?? true }
    }

    /// What the baseline at `url` claims to cover (``BaselineFile/claimedCovers(at:)``), read
    /// once per file as it is now (by path and identity).
    private func claimedCovers(_ url: URL) -> [String: UInt64]? {
        let key = identityKey(url)
        if let known = state.withLock({ $0.baselineClaims[key] }) { return known }
        let claimed = BaselineFile.claimedCovers(at: url)
        state.withLock { state in
            if state.baselineClaims.count >= 256 { state.baselineClaims.removeAll() }
            state.baselineClaims[key] = .some(claimed)
        }
        return claimed
    }

    /// The key of the file at `url` in what this process keeps of baselines: its path and
    /// identity (a file replaced under its name is read again).
    private func identityKey(_ url: URL) -> String {
        url.path + " "
            + (((try? FileSystem.identity(at: url.path)) ?? nil).map {
                "\($0.inode) \($0.size) \($0.modificationSeconds).\($0.modificationNanoseconds)"
            } ?? "")
    }

    /// The baseline that covers the most among those whose positions satisfy `wanted`, other
    /// than the one at `skipping` (the newest, already looked at). Positions it covered are
    /// kept by name, so that a later pass reads again only a baseline that might do.
    func baseline(
        skipping: URL?,
        where wanted: ([String: UInt64]) -> Bool
    ) -> (device: String, url: URL, baseline: BaselineFile)? {
        let replaced = identities.replacedContainers()
        for candidate in baselineCandidates() where candidate.url != skipping {
            // (By path and identity: a file replaced under its name is read again. One that
            // cannot be used covers nothing.)
            let key = identityKey(candidate.url)
            if let covers = state.withLock({ $0.baselineCovers[key] }), !wanted(covers) { continue }
            // A file whose payload does not claim positions wanted is not read whole: checked, it
            // would cover those positions or nothing.
            if let claimed = claimedCovers(candidate.url), !wanted(claimed) {
                state.withLock { state in
                    if state.baselineCovers.count >= 256 { state.baselineCovers.removeAll() }
                    state.baselineCovers[key] = claimed
                }
                continue
            }
            let file = checkedBaseline(candidate, replaced: replaced)
            state.withLock { state in
                // (Bounded: names change with every compaction; forgetting only costs a read.)
                if state.baselineCovers.count >= 256 { state.baselineCovers.removeAll() }
                state.baselineCovers[key] = file?.covers ?? [:]
            }
            if let file, wanted(file.covers) { return (candidate.device, candidate.url, file) }
        }
        return nil
    }

    /// Every baseline file in the devices' folders, the largest totals (as their names say)
    /// first; equal totals keep the folders' order (the first device's wins, as it always did).
    private func baselineCandidates() -> [(device: String, url: URL, total: UInt64)] {
        let folders = SyncFiles.names(in: layout.devicesFolder).sorted()
        var candidates: [(device: String, url: URL, total: UInt64)] = []
        for device in folders where ContainerLayout.isValidDeviceID(device) {
            let folder = layout.deviceFolder(device)
            for name in SyncFiles.names(in: folder).sorted()
            where name.hasPrefix(ContainerLayout.baselinePrefix) && name.hasSuffix(ContainerLayout.baselineExtension) {
                let digits = name.dropFirst(ContainerLayout.baselinePrefix.count).dropLast(
                    ContainerLayout.baselineExtension.count + 1
                )
                candidates.append((device, folder.appendingPathComponent(name), UInt64(digits) ?? .max))
            }
        }
        return candidates.enumerated().sorted { ($0.element.total, $1.offset) > ($1.element.total, $0.offset) }
            .map(\.element)
    }

    /// `candidate` read whole and checked; `nil` when it cannot be used: damaged, of a newer
    /// schema, in another device's folder than its own, or written for a container that was
    /// `replaced` by a device that had not seen the replacement (it holds that container's data).
    private func checkedBaseline(
        _ candidate: (device: String, url: URL, total: UInt64),
        replaced: Set<String>
    ) -> BaselineFile? {
        guard
            let file = try? BaselineFile(
                candidate.url,
                check: { changes in SyncPayload(changes: changes).malformation(in: self.coordinator.schema) }
            ),
            isUsable(BaselineFacts(file), as: candidate, replaced: replaced)
        else { return nil }
        return file
    }

    /// Whether a checked baseline that says `facts` of itself can be used: it is in its own
    /// device's folder, of this schema or an older one, and not written for a container that
    /// was `replaced` by a device that had not seen the replacement.
    private func isUsable(
        _ facts: BaselineFacts,
        as candidate: (device: String, url: URL, total: UInt64),
        replaced: Set<String>
    ) -> Bool {
        facts.device == candidate.device && facts.schemaVersion <= coordinator.schema.version
            && (facts.container.map { !replaced.contains($0) } ?? true) && facts.collectedThroughIsPlausible
    }

    /// This device's baselines in its own folder that reach numbers its numbering leapt over;
    /// none when it never leapt. A baseline that cannot be read, of a newer schema or of a
    /// replaced container is passed over.
    func oldOwnBaselines() throws -> [(url: URL, baseline: BaselineFile)] {
        guard let own = try versionsApplied(of: [deviceID])[deviceID], own.firstVoid != nil else { return [] }
        let folder = layout.deviceFolder(deviceID)
        let replaced = identities.replacedContainers()
        var found: [(url: URL, baseline: BaselineFile)] = []
        for name in SyncFiles.names(in: folder).sorted()
        where name.hasPrefix(ContainerLayout.baselinePrefix) && name.hasSuffix("." + ContainerLayout.baselineExtension)
        {
            let url = folder.appendingPathComponent(name)
            let key = "\(own.voids)/\(own.historyThrough ?? 0)/\(name)"
            guard !state.withLock({ $0.settledOwnBaselines.contains(key) }) else { continue }
            guard
                let file = try? BaselineFile(
                    url,
                    check: { SyncPayload(changes: $0).malformation(in: self.coordinator.schema) }
                ),
                file.log.device == deviceID, file.log.schemaVersion <= coordinator.schema.version,
                file.log.container.map({ !replaced.contains($0) }) ?? true
            else { continue }
            if !(file.covers[deviceID].map(own.isVoid) ?? false) {
                state.withLock { _ = $0.settledOwnBaselines.insert(key) }
            } else {
                found.append((url, file))
            }
        }
        return found
    }
}

/// What a process knows of the baseline files it read (bounded: names change with every
/// compaction, and forgetting only costs a read).
struct BaselineReaderState: Sendable {
    /// The newest baseline this process has read for catching up: its total (the number in its
    /// name) and what it covers, so that later passes tell without reading it again whether a
    /// device's next log is one only the baseline holds.
    var checkedBaseline: (total: UInt64, covers: [String: UInt64])?
    /// What other baselines cover, by path, read when the newest did not cover a missing log.
    var baselineCovers: [String: [String: UInt64]] = [:]
    /// What each baseline file this process read and checked for ``BaselineReader/newestBaselineCovers()``
    /// says of itself, by path and identity (`nil`: it failed the check), so that a process
    /// reads each file once, not at every pass that asks for the newest.
    var checkedBaselineFacts: [String: BaselineFacts?] = [:]
    /// What each baseline file says it covers (``BaselineFile/claimedCovers(at:)``), by path and
    /// identity (`nil`: that cannot be read).
    var baselineClaims: [String: [String: UInt64]?] = [:]
    /// This device's own baselines read and found to reach no history it lacks
    /// (numbers it leapt over), by those numbers and their names (see
    /// ``oldOwnBaselines()``).
    var settledOwnBaselines: Set<String> = []
}

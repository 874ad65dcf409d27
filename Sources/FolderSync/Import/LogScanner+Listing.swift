import ConcordSystem
import Foundation
import Synchronization

/// The names of one device folder, classified: what a scan needs from a listing. A folder whose
/// listing is unchanged since the last scan is not listed again, so a pass that finds nothing new
/// costs a `stat` per device, not a look at every log the folder holds.
struct FolderListing: Sendable {
    /// The logs, by ascending sequence.
    var logs: [(sequence: UInt64, name: String)] = []
    /// Conflict copies of logs, by name.
    var copies: [(sequence: UInt64, name: String)] = []
    var temporaries = 0
    /// Names that are neither logs, copies nor temporary files.
    var others: [String] = []

    init(names: [String]) {
        for name in names {
            switch ContainerLayout.classify(fileName: name) {
            case .temporary: temporaries += 1
            case .other: others.append(name)
            case .log(let sequence): logs.append((sequence, name))
            case .conflictCopy(let sequence): copies.append((sequence, name))
            }
        }
        logs.sort { $0.sequence < $1.sequence }
        copies.sort { $0.name < $1.name }
        others.sort()
    }

    /// The logs after `floor`.
    func logs(after floor: UInt64) -> ArraySlice<(sequence: UInt64, name: String)> {
        var low = 0
        var high = logs.count
        while low < high {
            let middle = (low + high) / 2
            if logs[middle].sequence <= floor { low = middle + 1 } else { high = middle }
        }
        return logs[low...]
    }
}

/// Listings kept from earlier scans, by folder path, with the folder's stamp when listed.
///
/// A directory's modification time changes when a name in it is added, removed or renamed; but
/// the kernel stamps it from a coarse clock, so two changes within one tick can share a stamp.
/// A listing is therefore reused only if the folder's stamp was already older than
/// ``trustAge`` when it was taken (the same rule git uses against "racy" index entries): a folder
/// that changed just before it was listed is listed again next time.
final class FolderListings: Sendable {
    static let trustAge: TimeInterval = 2

    private struct Kept {
        var identity: FileIdentity
        var listing: FolderListing
    }
    private let kept = Mutex<[String: Kept]>([:])

    /// The listing of `folder` (by `list`, or as kept when the folder has not changed since).
    func listing(of folder: URL, list: () throws(SyncError) -> [String]?) throws(SyncError) -> FolderListing? {
        let path = folder.path
        let before = try? FileSystem.identity(at: path)
        if let before, before.kind == .directory, let kept = kept.withLock({ $0[path] }), kept.identity == before {
            return kept.listing
        }
        guard let names = try list() else {
            kept.withLock { $0[path] = nil }
            return nil
        }
        let listing = FolderListing(names: names)
        let modified = before.map { Double($0.modificationSeconds) + Double($0.modificationNanoseconds) / 1e9 } ?? 0
        if let before, before.kind == .directory, Date().timeIntervalSince1970 - modified > Self.trustAge {
            kept.withLock { $0[path] = Kept(identity: before, listing: listing) }
        } else {
            kept.withLock { $0[path] = nil }
        }
        return listing
    }
}

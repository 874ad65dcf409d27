import FolderSync
import Foundation
import Persistence

extension SyncSimulator {
    /// The files a device writes for the others, relative to its view: everything but temporaries
    /// in its own device folder (logs, its acknowledgement, its requests, baselines) and its
    /// registration in the sentinel; and those of the ids its store had before
    /// (``renameAndRejoin(_:)``): it heals their logs.
    func ownFiles(of index: Int) -> [String] {
        var files: [String] = []
        for name in [devices[index].name] + (formerIDs[index] ?? []) {
            let folder = "notes/devices/\(name)"
            let names =
                (try? FileManager.default.contentsOfDirectory(
                    atPath: devices[index].view.appendingPathComponent(folder).path
                )) ?? []
            files += names.filter { ContainerLayout.classify(fileName: $0) != .temporary }.map { "\(folder)/\($0)" }
            let registration = "notes/sentinels/\(name).plist"
            if FileManager.default.fileExists(atPath: devices[index].view.appendingPathComponent(registration).path) {
                files.append(registration)
            }
        }
        // The container's identity, when this device started it.
        if let identity = identity(at: Self.identityPath, in: index),
            ([devices[index].name] + (formerIDs[index] ?? [])).contains(identity.device)
        {
            files.append(Self.identityPath)
        }
        return files.sorted()
    }

    /// Where the container's identity is, relative to a view.
    static let identityPath = "notes/container.plist"

    /// The container identity at `relative` in device `index`'s view, if it is one.
    func identity(at relative: String, in index: Int) -> ContainerIdentity? {
        guard let data = try? Data(contentsOf: devices[index].view.appendingPathComponent(relative)) else {
            return nil
        }
        let url = devices[index].view.appendingPathComponent(relative)
        return try? SentinelFiles.decode(data, url: url) as ContainerIdentity
    }

    /// Queues, for every other device, each file of device `index`'s own whose bytes changed since
    /// it was last queued, and the removal of each file it queued that is gone: what a sync
    /// engine notices and sends. A newer change of a file replaces one still on its way.
    func publish(from index: Int) throws {
        let files = ownFiles(of: index)
        // (A file of its own that the engine is still bringing it, on a new machine, is the
        // engine's to finish first, not news.)
        let arriving = Set(pending.filter { $0.target == index && !$0.removal }.map(\.relativePath))
        for relative in files where !arriving.contains(relative) {
            guard let bytes = try? Data(contentsOf: devices[index].view.appendingPathComponent(relative)),
                queued[index][relative] != bytes
            else { continue }
            queued[index][relative] = bytes
            enqueue(relative, from: index, removal: false)
        }
        let present = Set(files)
        // (An identity another device wrote over this one's is not a removal: the engine carried
        // the newer one here. The container's removal takes it from every copy.)
        for relative in queued[index].keys.sorted() where !present.contains(relative) && relative != Self.identityPath {
            queued[index][relative] = nil
            enqueue(relative, from: index, removal: true)
        }
    }

    func enqueue(_ relative: String, from source: Int, removal: Bool) {
        // A file its device writes again wins over a removal on its way to it (a replacement's).
        pending.removeAll { $0.relativePath == relative && $0.target == source && $0.removal }
        for target in devices.indices where target != source {
            pending.removeAll { $0.relativePath == relative && $0.target == target }
            pending.append(Delivery(relativePath: relative, source: source, target: target, removal: removal))
        }
    }

    func deliverOne(complete: Bool = false) throws {
        guard !pending.isEmpty else { return }
        let slot = random.below(pending.count)
        var delivery = pending[slot]
        let source = devices[delivery.source].view.appendingPathComponent(delivery.relativePath)
        let target = devices[delivery.target].view.appendingPathComponent(delivery.relativePath)
        if delivery.removal {
            pending.remove(at: slot)
            // A file of the target's own removed by another device (a replacement): if the target
            // writes it again, that is news for the others.
            queued[delivery.target][delivery.relativePath] = nil
            if FileManager.default.fileExists(atPath: target.path) { try FileManager.default.removeItem(at: target) }
            // A folder removed at the source goes too once empty, as an engine carries the
            // folder's removal (a replacement removes a retired device id's folder, say).
            let folder = target.deletingLastPathComponent()
            if !FileManager.default.fileExists(atPath: source.deletingLastPathComponent().path),
                (try? FileManager.default.contentsOfDirectory(atPath: folder.path))?.isEmpty == true
            {
                try FileManager.default.removeItem(at: folder)
            }
            trace.append("\(step): remove \(delivery.relativePath) from \(devices[delivery.target].name)")
            return
        }
        try FileManager.default.createDirectory(
            at: target.deletingLastPathComponent(),
            withIntermediateDirectories: true
        )
        guard let bytes = try? Data(contentsOf: source) else {
            // Removed at its source meanwhile: its removal is sent instead.
            pending.remove(at: slot)
            return
        }
        if !complete, !delivery.partialDone, random.chance(15) {
            // A non-atomic writer: half the file under its final name, the rest later.
            try bytes.prefix(bytes.count / 2).write(to: target)
            delivery.partialDone = true
            pending[slot] = delivery
            trace.append("\(step): partial \(delivery.relativePath) to \(devices[delivery.target].name)")
            return
        }
        if !complete, target.pathExtension == "cclog", random.chance(4) {
            // Damaged on the way (a disk or an engine garbling it): the right bytes come later.
            try Self.damaged(bytes).write(to: target)
            pending.remove(at: slot)
            pending.append(
                Delivery(relativePath: delivery.relativePath, source: delivery.source, target: delivery.target)
            )
            trace.append("\(step): damaged \(delivery.relativePath) to \(devices[delivery.target].name)")
            return
        }
        // A log of the target's own that it wrote differently meanwhile (a new machine numbering
        // before its old logs arrived): the engine keeps both, the arriving one as a conflict
        // copy, which it carries to the others.
        if target.pathExtension == "cclog",
            delivery.relativePath.hasPrefix("notes/devices/\(devices[delivery.target].name)/"),
            let existing = try? Data(contentsOf: target), existing != bytes,
            (try? LogFile.decode(existing, url: target)) != nil, (try? LogFile.decode(bytes, url: target)) != nil
        {
            let stem = target.deletingPathExtension().lastPathComponent
            let copy = "\(stem).sync-conflict-20261128-101010-RELAY\(delivery.source).cclog"
            try bytes.write(to: target.deletingLastPathComponent().appendingPathComponent(copy))
            pending.remove(at: slot)
            let relative = (delivery.relativePath as NSString).deletingLastPathComponent + "/" + copy
            for other in devices.indices where other != delivery.target {
                pending.append(Delivery(relativePath: relative, source: delivery.target, target: other))
            }
            trace.append(
                "\(step): \(delivery.relativePath) met another version on \(devices[delivery.target].name): \(copy)"
            )
            return
        }
        // Two devices that each started the container's identity, neither having seen the
        // other's: the engine keeps the one it has and the arriving one as a conflict copy, which
        // it carries to the others. (An identity that replaces the one here is newer: it wins.)
        if delivery.relativePath == Self.identityPath,
            let existing = identity(at: delivery.relativePath, in: delivery.target),
            let arriving = try? SentinelFiles.decode(bytes, url: target) as ContainerIdentity,
            existing.id != arriving.id, !(arriving.replaces ?? []).contains(existing.id)
        {
            let copy = "container.sync-conflict-20261206-101010-RELAY\(delivery.source).plist"
            try bytes.write(to: target.deletingLastPathComponent().appendingPathComponent(copy))
            pending.remove(at: slot)
            for other in devices.indices where other != delivery.target {
                pending.append(Delivery(relativePath: "notes/\(copy)", source: delivery.target, target: other))
            }
            trace.append(
                "\(step): \(delivery.relativePath) met another identity on \(devices[delivery.target].name): \(copy)"
            )
            return
        }
        // A sync engine's temporary file, then the rename.
        let temporary = target.deletingLastPathComponent().appendingPathComponent(
            ".syncthing.\(target.lastPathComponent).tmp"
        )
        try bytes.write(to: temporary)
        if FileManager.default.fileExists(atPath: target.path) { try FileManager.default.removeItem(at: target) }
        try FileManager.default.moveItem(at: temporary, to: target)
        if !complete, target.pathExtension == "cclog", random.chance(10) {
            // A conflict copy of an immutable file: same bytes, another name.
            let stem = target.deletingPathExtension().lastPathComponent
            let copy = target.deletingLastPathComponent().appendingPathComponent(
                "\(stem).sync-conflict-20261122-101010-ABCDEFG.cclog"
            )
            try? bytes.write(to: copy)
        }
        pending.remove(at: slot)
        if !complete, random.chance(10) {
            // Delivered again later: a duplicate.
            pending.append(
                Delivery(relativePath: delivery.relativePath, source: delivery.source, target: delivery.target)
            )
        }
        trace.append("\(step): deliver \(delivery.relativePath) to \(devices[delivery.target].name)")
    }

    /// A device publishes what it has applied and compacts (folding its history, removing logs
    /// everyone has, collecting stable tombstones); its acknowledgement, baseline and removals
    /// travel like logs. A device that is away does neither.
    func acknowledgeAndCompact(on index: Int) throws {
        guard phases[index] == .syncing else { return }
        let device = devices[index]
        // (Compaction writes the outbox first: a crashed process's saves go out with it.)
        guard
            let removed = try noticingReplacement(
                on: index,
                {
                    try device.sync.publishAcknowledgement()
                    return try device.sync.compact()
                }
            )
        else { return }
        unexported[index] = []
        try publish(from: index)
        trace.append("\(step): \(device.name) acknowledged and compacted \(removed) logs")
    }

    /// One of device `index`'s processes imports what arrived (nothing while it is away); returns
    /// how many logs it applied. With `mayEnd`, the process may be a command that is done: it
    /// stops sync from the import's own first event, and a new process takes its place.
    @discardableResult
    func importOn(_ index: Int, mayEnd: Bool = false) throws -> Int {
        let processes = devices[index].processes
        let process = random.below(processes.count)
        guard phases[index] == .syncing else { return 0 }
        let ends = mayEnd && lifecycle && random.chance(30)
        var observer: (any NSObjectProtocol)?
        if ends {
            let sync = processes[process].sync
            observer = NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: sync, queue: nil) {
                if case .importStarted = $0.userInfo?["event"] as? SyncEvent { sync.stop() }
            }
        }
        let report = try noticingReplacement(on: index, { try processes[process].sync.importAvailable() })
        if let observer { NotificationCenter.default.removeObserver(observer) }
        if ends, phases[index] == .syncing {
            try crash(process, of: index)
            trace.append(
                "\(step): \(devices[index].name) process \(process) stopped during its import and was replaced"
            )
        }
        guard let report else { return 0 }
        try publish(from: index)
        if report.logs > 0 { trace.append("\(step): \(devices[index].name) imported \(report.logs)") }
        return report.logs
    }
}

import FolderSync
import Foundation
import Persistence

// A device that replaces the container with its data, and how the others find out: at once (they
// stop first, as a reset they see stops them), or file by file, as a sync engine carries the
// replacement while they go on syncing until something tells them.

extension SyncSimulator {
    /// Device `index`, disabled, enables sync again replacing the container with its data.
    ///
    /// Half the time every other device stops first (as a reset it detects stops it) and is
    /// disabled, and the replacement reaches every view at once: the store's folder of each
    /// becomes the replacing device's (files on their way are dropped).
    ///
    /// Otherwise the devices that are syncing go on, and the replacement travels like any other
    /// change: the files it removed go from each view, its files arrive, one delivery at a time in
    /// any order. Until its identity arrives a device may export, import, compact and heal in what
    /// is now another container; then its next export or import stops it
    /// (``noticingReplacement(on:_:)``). Away devices stop at once, as in the first case.
    ///
    /// Each comes back later with a join choice.
    func replaceContainer(by index: Int) throws {
        let gradual = random.chance(50)
        // The files the replacing device's copy holds before it removes the store's folder: the
        // only ones whose removal the engine carries (it cannot remove what it never had).
        let removed = Set(try storeFiles(in: index))
        for other in devices.indices where other != index && phases[other] != .disabled {
            if gradual, phases[other] == .syncing { continue }
            if phases[other] == .paused { try resume(other) }
            try disable(other)
        }
        var joins: [String] = []
        do {
            for (number, process) in devices[index].processes.enumerated() {
                let policy: SyncJoinPolicy = .always(
                    number == 0 ? .replaceContainerWithLocal : .mergeLocalIntoContainer
                )
                let enabling = try process.sync.enable(policy: policy, live: false)
                joins.append(enabling.join.map(String.init(describing:)) ?? "\(enabling.state)")
            }
        } catch let error as SyncError where error.code == .corruptSentinel {
            // A registration still arriving: the replacement is refused, and the device merges.
            trace.append("\(step): \(devices[index].name) could not replace the container: \(error.message)")
            try rejoin(index, choice: .mergeLocalIntoContainer)
            return
        }
        phases[index] = .syncing
        unexported[index] = []
        ledger.replaceContainer(holding: try contents(index).map(\.id), step: step, device: index)
        // Files on their way belong to the container that is gone. (Arriving file by file, only
        // those the replacing device removed: a file it never had, another device's identity or
        // baseline written meanwhile, travels on as an engine carries it. Seed 1624: device2,
        // having seen the container deleted, replaced it before device0's new identity and
        // baseline reached it; dropping them and removing them from device0's copy took the only
        // copy of what device0's log 1 held, which its later logs wait for everywhere.)
        if gradual {
            pending.removeAll { $0.source == index || removed.contains($0.relativePath) }
        } else {
            pending.removeAll()
        }
        let source = devices[index].view.appendingPathComponent("notes")
        for other in devices.indices where other != index {
            replacedWhileAway.insert(other)
            if gradual {
                try sendReplacement(from: index, to: other, removed: removed)
            } else {
                let target = devices[other].view.appendingPathComponent("notes")
                if FileManager.default.fileExists(atPath: target.path) {
                    try FileManager.default.removeItem(at: target)
                }
                try FileManager.default.copyItem(at: source, to: target)
                queued[other] = [:]
            }
        }
        queued[index] = [:]
        try publish(from: index)
        trace.append(
            "\(step): \(devices[index].name) replaced the container\(gradual ? " (arriving file by file)" : ""): "
                + joins.joined(separator: "; ")
        )
    }

    /// Queues, for device `other`, the removal of every file of its view's store folder that the
    /// replacing device `index` `removed` and no longer has, and every file `index` has.
    func sendReplacement(from index: Int, to other: Int, removed: Set<String>) throws {
        // A device folder the replacement does not have and that holds nothing goes at once (the
        // others go as their last file does).
        let devicesFolder = "notes/devices"
        let fileManager = FileManager.default
        for name
            in (try? fileManager.contentsOfDirectory(
                atPath: devices[other].view.appendingPathComponent(devicesFolder).path
            )) ?? []
        where !fileManager.fileExists(
            atPath: devices[index].view.appendingPathComponent("\(devicesFolder)/\(name)").path
        ) {
            let folder = devices[other].view.appendingPathComponent("\(devicesFolder)/\(name)")
            if (try? fileManager.contentsOfDirectory(atPath: folder.path))?.isEmpty == true {
                try fileManager.removeItem(at: folder)
            }
        }
        let kept = Set(try storeFiles(in: index))
        for relative in try storeFiles(in: other) where !kept.contains(relative) && removed.contains(relative) {
            pending.append(Delivery(relativePath: relative, source: index, target: other, removal: true))
        }
        for relative in kept.sorted() {
            pending.append(Delivery(relativePath: relative, source: index, target: other))
        }
    }

    /// Every file under device `index`'s view of the store's folder, relative to the view, but
    /// temporaries.
    func storeFiles(in index: Int) throws -> [String] {
        let view = devices[index].view
        guard let enumerator = FileManager.default.enumerator(atPath: view.appendingPathComponent("notes").path)
        else { return [] }
        var files: [String] = []
        while let relative = enumerator.nextObject() as? String {
            let path = "notes/\(relative)"
            var isFolder: ObjCBool = false
            guard
                FileManager.default.fileExists(atPath: view.appendingPathComponent(path).path, isDirectory: &isFolder),
                !isFolder.boolValue,
                ContainerLayout.classify(fileName: (relative as NSString).lastPathComponent) != .temporary
            else { continue }
            files.append(path)
        }
        return files.sorted()
    }

    /// Runs an export, import or compaction of device `index`. A device that finds the container
    /// replaced under it (its identity arrived: sync stops, and the call throws) is stopped as
    /// its app would stop it, and comes back later with a join choice; `nil` then.
    func noticingReplacement<T>(on index: Int, _ body: () throws -> T) throws -> T? {
        do {
            return try body()
        } catch let error as SyncError where error.code == .invalidState {
            let processes = devices[index].processes
            guard processes.contains(where: { if case .reset = $0.sync.state { true } else { false } }) else {
                throw error
            }
            // No two installations here share a device id: a stop for one is a false alarm.
            guard !processes.contains(where: { $0.sync.state == .reset(.deviceIDInUse) }) else {
                trace.append("\(step): \(devices[index].name) stopped for another installation: \(error.message)")
                throw error
            }
            // Its other processes stop too (each would on its next export or import).
            for process in processes where process.sync.state == .syncing { process.sync.pause() }
            phases[index] = .disabled
            replacedWhileAway.insert(index)
            trace.append("\(step): \(devices[index].name) found the container replaced: \(error.message)")
            return nil
        }
    }

    /// After device `index` joined with `chosen` (`nil`: it resumed): a device that was in a
    /// container that was replaced meanwhile joined another one. The ledger learns what its
    /// choice did to the saves it made there.
    func noteJoin(of index: Int, chosen: SyncJoinChoice?) throws {
        guard let chosen, replacedWhileAway.contains(index) else { return }
        replacedWhileAway.remove(index)
        // In another container: what it holds now is all its join can keep of its earlier life.
        restoring[index] = nil
        switch chosen {
        case .replaceLocalWithContainer:
            // (Its saves that went out may live on in a device that applied them and merges.)
            ledger.giveUpEverySave(of: index, exported: Set(ledger.saves(of: index)).subtracting(unexported[index]))
        case .mergeLocalIntoContainer:
            ledger.revive(try contents(index).map(\.id), step: step, device: index)
            try renumberJoinedSaves(of: index)
        case .replaceContainerWithLocal: try renumberJoinedSaves(of: index)
        }
    }

    /// Device `index` took its data into a new container: the logs of that export, numbered
    /// afresh there, carry what its earlier saves wrote, whatever numbers those had in the old
    /// container. A later loss of the logs only it held takes them with it.
    private func renumberJoinedSaves(of index: Int) throws {
        guard let exported = try devices[index].processes[0].store.syncMetadataValue(SyncMetadata.sequence) else {
            return
        }
        for save in ledger.saves(of: index) { logNumbers[save] = exported }
    }
}

import FolderSync
import Foundation
import Persistence

extension SyncSimulator {
    /// The tombstone lifetime while a device is away and until the next settle: longer than any
    /// absence in a run, as `FolderSync.tombstoneLifetime` is meant to be (a device away for
    /// longer than the lifetime brings back what was deleted meanwhile: a documented limit).
    static let absentLifetime: Duration = .seconds(3600)

    /// Every device's processes enable sync (not live: the simulator drives exports and imports).
    /// The first device starts the container; its identity reaches the others' views before
    /// they set up, as a sync engine carries it.
    func enableEveryDevice() throws {
        for index in devices.indices {
            if index > 0 {
                let identity = "notes/container.plist"
                let bytes = try Data(contentsOf: devices[0].view.appendingPathComponent(identity))
                try bytes.write(to: devices[index].view.appendingPathComponent(identity))
            }
            for process in devices[index].processes { try process.sync.enable(live: false) }
            try publish(from: index)
        }
    }

    /// A lifecycle step for device `index`: a syncing device pauses or is disabled, a paused one
    /// resumes, a disabled one is enabled again with a join choice.
    func changePhase(of index: Int, replacing: Bool = true) throws {
        switch phases[index] {
        case .syncing:
            // (A device in a container replaced under it is not paused: resuming would join the
            // new container with the last policy it was given, not with a choice of the run's.)
            if !replacedWhileAway.contains(index), random.chance(50) { pause(index) } else { try disable(index) }
        case .paused:
            try resume(index)
        case .disabled:
            if replacing, random.chance(35) {
                try replaceContainer(by: index)
            } else if !replacedWhileAway.contains(index), random.chance(15) {
                try renameAndRejoin(index)
            } else {
                try rejoin(index, choice: random.chance(50) ? .mergeLocalIntoContainer : .replaceLocalWithContainer)
            }
        }
    }

    /// Every device that is away comes back (before settling).
    func bringEveryDeviceBack() throws {
        for index in devices.indices where phases[index] != .syncing { try changePhase(of: index, replacing: false) }
    }

    /// Every process of device `index` pauses: saves go on, nothing is exported or imported.
    func pause(_ index: Int) {
        for process in devices[index].processes { process.sync.pause() }
        phases[index] = .paused
        trace.append("\(step): \(devices[index].name) paused")
    }

    /// Every process of device `index` resumes; what it saved meanwhile goes out.
    func resume(_ index: Int) throws {
        var joins: [String] = []
        var chosen: SyncJoinChoice?
        for process in devices[index].processes {
            let enabling: SyncEnabling
            do {
                enabling = try process.sync.resume()
            } catch let error as SyncError where error.code == .corruptSentinel && joins.isEmpty {
                // Paused in a container that was removed, it resumes with the last policy it was
                // given: the default replaces the container for a returning device that sees
                // nobody else there, and a replacement is refused while a registration is still
                // arriving (cut short). Nothing was joined: the device merges instead, as an app
                // told of the refusal would choose (as in ``replaceContainer(by:)``).
                trace.append("\(step): \(devices[index].name) could not resume: \(error.message)")
                try rejoin(index, choice: .mergeLocalIntoContainer)
                return
            }
            chosen = chosen ?? enabling.join?.choice
            joins.append(enabling.join.map(String.init(describing:)) ?? "\(enabling.state)")
        }
        // (Paused in a container replaced under it: resuming joins the new one.)
        try noteJoin(of: index, chosen: chosen)
        if chosen == .replaceLocalWithContainer {
            giveUpUnexported(index)
        }
        phases[index] = .syncing
        try exportAfterReturn(index)
        trace.append("\(step): \(devices[index].name) resumed: \(joins.joined(separator: "; "))")
    }

    /// Every process of device `index` disables sync: its registration goes, it says it left;
    /// saves go on.
    func disable(_ index: Int) throws {
        for process in devices[index].processes { try process.sync.disable() }
        phases[index] = .disabled
        for process in devices.flatMap(\.processes) { process.sync.tombstoneLifetime = Self.absentLifetime }
        try publish(from: index)
        trace.append("\(step): \(devices[index].name) disabled")
    }

    /// Device `index`, disabled, enables sync again with `choice` (its first process joins, the
    /// others then resume). With ``SyncJoinChoice/replaceLocalWithContainer`` the saves it made
    /// while away are given up.
    func rejoin(_ index: Int, choice: SyncJoinChoice) throws {
        var joins: [String] = []
        var chosen: SyncJoinChoice?
        for (number, process) in devices[index].processes.enumerated() {
            let enabling = try process.sync.enable(policy: .always(choice), live: false)
            if number == 0 { chosen = enabling.join?.choice }
            joins.append(enabling.join.map(String.init(describing:)) ?? "\(enabling.state)")
        }
        try noteJoin(of: index, chosen: chosen)
        if chosen == .replaceLocalWithContainer {
            giveUpUnexported(index)
        }
        phases[index] = .syncing
        try exportAfterReturn(index)
        trace.append("\(step): \(devices[index].name) enabled (\(choice.rawValue)): \(joins.joined(separator: "; "))")
    }

    /// Device `index`, disabled, gives its store a new device id (`FolderSync.assignNewDeviceID`)
    /// and enables sync under it with a join choice: merging (mostly), its data goes out under
    /// the new id with the clocks it has. Its processes under the old id refuse to save; the app
    /// opens new ones.
    func renameAndRejoin(_ index: Int) throws {
        let device = devices[index]
        let old = device.name
        // (Never an id used before: a retired id has history in the container.)
        let id = try FolderSync.assignNewDeviceID(
            "\(Self.home(index))r\((formerIDs[index]?.count ?? 0) + 1)",
            to: device.store
        )
        for (number, process) in device.processes.enumerated() {
            let context = ObjectContext(coordinator: process.coordinator, origin: .local, name: "old id")
            _ = try context.insert(entity: "Tag", values: ["label": .string("saved under the old id")])
            do {
                try context.save()
                lifecycleProblems.append("\(step): \(old) process \(number) saved under its old id, now \(id)")
            } catch let error as SyncError where error.code == .invalidState {}
            process.sync.stop()
            process.coordinator.removeStore(process.store)
        }
        devices[index] = Device(name: id, processes: try openProcesses(index: index, name: id), view: device.view)
        formerIDs[index, default: []].append(old)
        try shareDeviceFolders()
        trace.append("\(step): \(old) took the device id \(id)")
        try rejoin(index, choice: random.chance(75) ? .mergeLocalIntoContainer : .replaceLocalWithContainer)
    }

    /// What device `index` saved while away goes out (a random process exports).
    func exportAfterReturn(_ index: Int) throws {
        let processes = devices[index].processes
        guard
            try noticingReplacement(on: index, { try processes[random.below(processes.count)].sync.exportPending() })
                != nil
        else { return }
        unexported[index] = []
        try publish(from: index)
    }

    /// After settling: no device is away, so tombstones may go as soon as they are stable again.
    func restoreTombstoneLifetime() {
        for process in devices.flatMap(\.processes) { process.sync.tombstoneLifetime = .zero }
    }

    /// Process `number` of device `index` (syncing) dies with no chance to clean up, and a new
    /// process of the app starts in its place and enables sync.
    func crash(_ number: Int, of index: Int) throws {
        let device = devices[index]
        let dead = device.processes[number]
        dead.sync.stop()
        dead.coordinator.removeStore(dead.store)
        var processes = device.processes
        processes[number] = try openProcess(
            index: index,
            name: device.name,
            storeURL: directory.appendingPathComponent("stores/\(Self.home(index)).json"),
            view: device.view
        )
        devices[index] = Device(name: device.name, processes: processes, view: device.view)
        // (In a container replaced under it, the new process joins the new one: with a choice.)
        let policy: SyncJoinPolicy =
            replacedWhileAway.contains(index)
            ? .always(random.chance(50) ? .mergeLocalIntoContainer : .replaceLocalWithContainer) : .default
        let enabling = try processes[number].sync.enable(policy: policy, live: false)
        try noteJoin(of: index, chosen: enabling.join?.choice)
        if enabling.join?.choice == .replaceLocalWithContainer {
            giveUpUnexported(index)
        }
    }

    /// Device `index` loses its store (a new machine, a wiped disk): every process goes, the file
    /// goes (with the saves it had not exported), and fresh processes rejoin under the same
    /// device name with the default policy.
    func loseStore(of index: Int) throws {
        let device = devices[index]
        // A device whose own log was removed from the container keeps its store until it has
        // published the log again: losing both destroys the only copies of what the log held
        // (no design can bring that back), so the simulation does not combine the two faults.
        lostLogs[index] = lostLogs[index].filter {
            !FileManager.default.fileExists(atPath: device.view.appendingPathComponent($0).path)
        }
        guard lostLogs[index].isEmpty else {
            trace.append(
                "\(step): \(device.name) keeps its store: own logs lost from the container wait to be published again"
            )
            return
        }
        for process in device.processes {
            process.sync.stop()
            process.coordinator.removeStore(process.store)
        }
        // Its saves that went out before the container was replaced or removed reached the devices
        // that applied them: what they deleted stays deleted in a device that merges (as for
        // ``noteJoin(of:chosen:)`` with replaceLocalWithContainer), though this device's new
        // store holds none of it.
        let exported = Set(ledger.saves(of: index)).subtracting(unexported[index])
        giveUpUnexported(index)
        // Away while the container was replaced: what it saved before is in no container.
        if replacedWhileAway.remove(index) != nil { ledger.giveUpEverySave(of: index, exported: exported) }
        // What it saved so far is in the container, no longer in its store: it restores it.
        restoring[index, default: []].formUnion(ledger.saves(of: index))
        // Now and then the device is a new machine: its copy of the container goes too, and the
        // engine fills the new one from the others while the device already syncs. (Once its
        // registration has reached another machine: a device gone before that, with logs the
        // others hold and no registration anywhere, is one nobody can tell from a new device.)
        let registration = "notes/sentinels/\(device.name).plist"
        let registered = try? Data(contentsOf: device.view.appendingPathComponent(registration))
        let newMachine =
            newMachines && random.chance(50) && registered != nil && formerIDs[index] == nil
            && devices.indices.contains {
                $0 != index
                    && (try? Data(contentsOf: devices[$0].view.appendingPathComponent(registration))) == registered
            }
        if newMachine { try moveToNewMachine(index) }
        try FileManager.default.removeItem(at: directory.appendingPathComponent("stores/\(Self.home(index)).json"))
        let processes = try openProcesses(index: index, name: device.name)
        devices[index] = Device(name: device.name, processes: processes, view: device.view)
        phases[index] = .syncing
        var joins: [String] = []
        for process in processes {
            let enabling = try process.sync.enable(live: false)
            joins.append(enabling.join.map(String.init(describing:)) ?? "\(enabling.state)")
        }
        try publish(from: index)
        trace.append(
            "\(step): \(device.name) lost its store\(newMachine ? " and its machine" : "") and rejoined: \(joins.joined(separator: "; "))"
        )
    }

    /// Device `index`'s copy of the container goes with its machine. Its saves whose logs no
    /// other copy holds go with it (they promise nothing). The engine fills the new copy from
    /// the others: the container's identity and the registrations at once, every device
    /// folder's files (each from one of the copies that has it) in any order, later.
    func moveToNewMachine(_ index: Int) throws {
        func bytes(_ path: String, in holder: Int) -> Data? {
            try? Data(contentsOf: devices[holder].view.appendingPathComponent(path))
        }
        let name = devices[index].name
        let others = devices.indices.filter { $0 != index }
        let ownLogs = "notes/devices/\(name)/"
        var onlyHere: Set<UInt64> = []
        // A log folded into a baseline of its device that another copy holds whole went out in
        // it: its saves are in the container (the restored device takes that baseline in and
        // sends its writes out again), so they are not given up.
        var folded: UInt64 = 0
        for path in try storeFiles(in: index)
        where path.hasPrefix(ownLogs + "baseline-") && path.hasSuffix(".ccbase") {
            let whole = bytes(path, in: index)
            guard others.contains(where: { bytes(path, in: $0) == whole }),
                let baseline = try? DecodedLogFile.read(devices[index].view.appendingPathComponent(path))
            else { continue }
            folded = max(folded, baseline.covers[name] ?? 0)
        }
        for path in try storeFiles(in: index) where path.hasPrefix(ownLogs) && path.hasSuffix(".cclog") {
            // (A copy cut short elsewhere does not count: its rest was to come from here.)
            let whole = bytes(path, in: index)
            guard case .log(let sequence) = ContainerLayout.classify(fileName: (path as NSString).lastPathComponent),
                sequence > folded, !others.contains(where: { bytes(path, in: $0) == whole })
            else { continue }
            onlyHere.insert(sequence)
        }
        // (So do the saves of its later logs: each waits for the lost one before it. But the
        // restored device publishes a stand-in for a lost log when asked (healing), and then the
        // others apply the later logs that another copy holds: those saves reached the container
        // all the same, and what they deleted may stay deleted.)
        let firstLost = onlyHere.min() ?? .max
        var heldElsewhere: Set<UInt64> = []
        for other in others {
            for path in try storeFiles(in: other) where path.hasPrefix(ownLogs) && path.hasSuffix(".cclog") {
                guard
                    case .log(let sequence) = ContainerLayout.classify(fileName: (path as NSString).lastPathComponent),
                    let data = bytes(path, in: other),
                    (try? LogFile.decode(data, url: devices[other].view.appendingPathComponent(path))) != nil
                else { continue }
                heldElsewhere.insert(sequence)
            }
        }
        let later = ledger.saves(of: index).filter { logNumbers[$0].map { $0 >= firstLost } ?? false }
        ledger.giveUp(
            later,
            exported: Set(
                later.filter { save in
                    logDevices[save] == name && logNumbers[save].map { heldElsewhere.contains($0) } ?? false
                }
            )
        )
        // Another device's log that only this copy holds whole goes with it too: that device's own
        // copy lacks it only while its new machine's copy refills (from here, say), and a copy cut
        // short elsewhere is not the log. Nothing brings it back (the store that applied it goes
        // with this machine), so its saves, and those of its device's later logs that wait for it,
        // are given up as this device's own are above (seed 744).
        for other in others {
            let owner = devices[other].name
            let folder = "notes/devices/\(owner)/"
            // (What a baseline another copy holds whole covers went out in it.)
            var covered: UInt64 = 0
            var heldWhole: Set<UInt64> = []
            for holder in others {
                for path in try storeFiles(in: holder) where path.hasPrefix("notes/devices/") {
                    let url = devices[holder].view.appendingPathComponent(path)
                    if path.hasSuffix(".ccbase"), let baseline = try? DecodedLogFile.read(url) {
                        covered = max(covered, baseline.covers[owner] ?? 0)
                    } else if path.hasPrefix(folder),
                        case .log(let sequence) = ContainerLayout.classify(fileName: url.lastPathComponent),
                        let data = bytes(path, in: holder), (try? LogFile.decode(data, url: url)) != nil
                    {
                        heldWhole.insert(sequence)
                    }
                }
            }
            var lost: Set<UInt64> = []
            for path in try storeFiles(in: index) where path.hasPrefix(folder) && path.hasSuffix(".cclog") {
                let url = devices[index].view.appendingPathComponent(path)
                guard case .log(let sequence) = ContainerLayout.classify(fileName: url.lastPathComponent),
                    sequence > covered, let whole = bytes(path, in: index),
                    (try? LogFile.decode(whole, url: url)) != nil,
                    !others.contains(where: { bytes(path, in: $0) == whole })
                else { continue }
                lost.insert(sequence)
            }
            guard let firstLost = lost.min() else { continue }
            let waiting = ledger.saves(of: other).filter { save in
                logDevices[save] == owner && logNumbers[save].map { $0 >= firstLost } ?? false
            }
            ledger.giveUp(
                waiting,
                exported: Set(waiting.filter { logNumbers[$0].map { heldWhole.contains($0) } ?? false })
            )
        }
        // A deletion that this machine made and the engine had not carried yet goes with it (a
        // log lost from this copy, say). The copies of the file that the deletion stopped on
        // their way to the others (``loseLog(in:)``) are on their way again, from the file's
        // device, to each copy that lacks the file: otherwise nothing ever brings it there, as
        // its device holds it unchanged and publishes it again only when its own copy is gone.
        let undone = pending.filter { $0.source == index && $0.removal }
        // So do the files on their way from this copy to another (another new machine's refill,
        // say): the engine brings them from a copy that still holds them. Otherwise nothing ever
        // does, as only a file's own device publishes it again (a restored device's old log it
        // has not got back, which the others hold, would never reach it).
        let stranded = pending.filter { $0.source == index && $0.target != index && !$0.removal }
        pending.removeAll { $0.source == index || $0.target == index }
        for removal in undone {
            let path = removal.relativePath
            guard let owner = others.first(where: { path.hasPrefix("notes/devices/\(devices[$0].name)/") }),
                owner != removal.target, let whole = bytes(path, in: owner), bytes(path, in: removal.target) != whole,
                !pending.contains(where: { $0.relativePath == path && $0.target == removal.target })
            else { continue }
            pending.append(Delivery(relativePath: path, source: owner, target: removal.target))
        }
        for delivery in stranded {
            let path = delivery.relativePath
            guard let whole = bytes(path, in: index),
                let holder = others.first(where: { $0 != delivery.target && bytes(path, in: $0) == whole }),
                !pending.contains(where: { $0.relativePath == path && $0.target == delivery.target })
            else { continue }
            pending.append(Delivery(relativePath: path, source: holder, target: delivery.target))
        }
        queued[index] = [:]
        // (Its copy may be gone already: the container was removed.)
        let copy = devices[index].view.appendingPathComponent("notes")
        if FileManager.default.fileExists(atPath: copy.path) { try FileManager.default.removeItem(at: copy) }
        var sources: [String: [Int]] = [:]
        for other in others { for path in try storeFiles(in: other) { sources[path, default: []].append(other) } }
        for (path, holders) in sources.sorted(by: { $0.key < $1.key }) {
            // A registration its device removed (it left, under an id its store no longer has)
            // is gone in the engine's newest version, whatever stale copy another machine holds.
            if let registrant = devices.indices.first(where: { registrant in
                ([devices[registrant].name] + (formerIDs[registrant] ?? [])).contains {
                    path == "notes/sentinels/\($0).plist"
                }
            }), registrant != index, !holders.contains(registrant) {
                continue
            }
            // (From its device's own copy when that device holds it, else from one that has it
            // whole: a copy may hold half of it, still arriving.)
            let owner = holders.first { path.hasPrefix("notes/devices/\(devices[$0].name)/") }
            // (A log a copy holds damaged is not what a real engine carries when another copy
            // holds it whole: the engine's newest version is the writer's.)
            let whole = holders.first { holder in
                guard path.hasSuffix(".cclog"), let data = bytes(path, in: holder) else { return false }
                return (try? LogFile.decode(data, url: devices[holder].view.appendingPathComponent(path))) != nil
            }
            let source =
                owner ?? whole
                ?? holders.max { (bytes(path, in: $0)?.count ?? 0) < (bytes(path, in: $1)?.count ?? 0) }!
            if path.hasPrefix("notes/devices/") {
                pending.append(Delivery(relativePath: path, source: source, target: index))
            } else {
                let target = devices[index].view.appendingPathComponent(path)
                try FileManager.default.createDirectory(
                    at: target.deletingLastPathComponent(),
                    withIntermediateDirectories: true
                )
                try FileManager.default.copyItem(at: devices[source].view.appendingPathComponent(path), to: target)
            }
        }
        try shareDeviceFolders()
        trace.append(
            "\(step): \(name) is a new machine: \(onlyHere.count) log(s) only it held are gone (\(onlyHere.sorted()))"
        )
    }

    /// Gives up the saves of device `index` that never reached the container: their device
    /// replaced its data or lost its store. (A save some later process exported, as a process
    /// that replaces a crashed one does when it enables sync, is in the container: it holds.)
    func giveUpUnexported(_ index: Int) {
        let device = devices[index]
        let sync = device.processes[0].sync
        ledger.giveUp(
            unexported[index].filter { save in
                guard let number = logNumbers[save] else { return true }
                // (A log given up goes out empty under its number: that is not the save.)
                let log = sync.layout.logURL(device: logDevices[save] ?? sync.deviceID, sequence: number)
                return (try? DecodedLogFile.read(log))?.changes.isEmpty ?? true
            }
        )
        unexported[index] = []
    }
}
